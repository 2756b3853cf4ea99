"""Other views of a graph: a networkx multigraph for analysis, Graphviz DOT text, and plain JSON.

All three number nodes as the printer does, so `%7` means the same node everywhere.
"""

from __future__ import annotations

import enum
from typing import Any

import networkx as nx
import numpy as np

from pseudoformer.ir.graph import Graph
from pseudoformer.ir.printer import format_value, graph_name, location, quote, value_numbers
from pseudoformer.ir.types import DType, Span, TensorType


def to_networkx(graph: Graph) -> nx.MultiDiGraph:
    """Nodes keyed by value number with attrs op, type, name, span, scope and node (the Node itself).

    Edges run operand -> user, one per operand position with attr `index`; a multigraph so that
    x*x keeps both of its edges. Graph attrs: name, inputs (numbers), outputs ((name, number)), meta.
    """
    nodes = graph.nodes()
    numbers = value_numbers(nodes)
    g = nx.MultiDiGraph(
        name=graph_name(graph),
        inputs=[numbers[id(n)] for n in graph.inputs],
        outputs=[(name, numbers[id(n)]) for name, n in graph.outputs],
        meta=dict(graph.meta),
    )
    for n in nodes:
        g.add_node(numbers[id(n)], op=n.op, type=n.type, name=n.name, span=n.span, scope=n.scope, node=n)
    for n in nodes:
        for i, s in enumerate(n.src):
            g.add_edge(numbers[id(s)], numbers[id(n)], key=i, index=i)
    return g


def to_dot(graph: Graph) -> str:
    """Graphviz DOT text: inputs and outputs as ellipses, ops as boxes; edges labelled by operand
    position when an op takes more than one operand, since order matters (sub, matmul, where)."""
    nodes = graph.nodes()
    numbers = value_numbers(nodes)
    declared = {id(n) for n in graph.inputs}
    lines = [
        f"digraph {quote(graph_name(graph))} {{",
        '  node [shape=box, fontname="monospace"];',
    ]
    for n in nodes:
        k = numbers[id(n)]
        if id(n) in declared:
            # quote() writes a newline as \n, which DOT reads as a line break.
            label = quote(f"{n.name}\n{n.type}")
            lines.append(f"  n{k} [label={label}, shape=ellipse];")
            continue
        head = f"%{k} {n.op.value}"
        attrs = {a: v for a, v in n.attrs.items() if a != "type"}
        if attrs:
            head += " " + ", ".join(f"{a}={format_value(attrs[a])}" for a in sorted(attrs))
        loc = location(n.span, n.scope)
        tooltip = f", tooltip={quote(loc)}" if loc else ""
        label = quote(f"{head}\n{n.type}")
        lines.append(f"  n{k} [label={label}{tooltip}];")
    for n in nodes:
        many = len(n.src) > 1
        for i, s in enumerate(n.src):
            label = f' [label="{i}"]' if many else ""
            lines.append(f"  n{numbers[id(s)]} -> n{numbers[id(n)]}{label};")
    for j, (name, n) in enumerate(graph.outputs):
        lines.append(f"  out{j} [label={quote(name)}, shape=ellipse, style=bold];")
        lines.append(f"  n{numbers[id(n)]} -> out{j};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _json_type(t: TensorType) -> dict[str, Any]:
    return {"dtype": t.dtype.value, "shape": list(t.shape)}


def _json_span(s: Span | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"file": s.file, "line": s.line, "col": s.col, "end_line": s.end_line, "end_col": s.end_col}


def to_jsonable(v: Any) -> Any:
    """Attribute and meta values as JSON values. Non-finite floats stay floats (the -inf of a mask
    matters); json.dumps writes them as -Infinity/NaN, which Python and JavaScript read back."""
    if isinstance(v, bool | int | float | str) or v is None:
        return v
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, DType):
        return v.value
    if isinstance(v, TensorType):
        return _json_type(v)
    if isinstance(v, Span):
        return _json_span(v)
    if isinstance(v, enum.Enum):
        return to_jsonable(v.value)
    if isinstance(v, list | tuple):
        return [to_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): to_jsonable(x) for k, x in v.items()}
    return str(v)


def to_json(graph: Graph) -> dict[str, Any]:
    """{"name", "nodes": [{id, op, inputs, attrs, type, span, scope}], "inputs": [{name, id}],
    "outputs": [{name, id}], "meta"}; node ids are the printer's value numbers."""
    nodes = graph.nodes()
    numbers = value_numbers(nodes)
    return {
        "name": graph_name(graph),
        "nodes": [
            {
                "id": numbers[id(n)],
                "op": n.op.value,
                "inputs": [numbers[id(s)] for s in n.src],
                "attrs": {k: to_jsonable(n.attrs[k]) for k in sorted(n.attrs)},
                "type": _json_type(n.type),
                "span": _json_span(n.span),
                "scope": n.scope,
            }
            for n in nodes
        ],
        "inputs": [{"name": n.name, "id": numbers[id(n)]} for n in graph.inputs],
        "outputs": [{"name": name, "id": numbers[id(n)]} for name, n in graph.outputs],
        "meta": to_jsonable(graph.meta),
    }
