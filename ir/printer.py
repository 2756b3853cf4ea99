"""A deterministic text dump of a graph, for humans, golden tests and error messages.

    graph GPT2(x: int64[batch, seq]) -> (P: float32[batch, seq, 50257])
      %1 = param "W_e" : float32[768, 50257]
      %2 = gather %1, %x {axis=1} : float32[768, batch, seq]  # models/gpt2.alg:14  GPT2
      ...
      return P = %17

Every node gets a number in `Graph.nodes()` order, declared inputs included (as LLVM numbers a
function's arguments), so the numbers here, in `view` and in verifier messages all agree; inputs are
still written by name. Nothing depends on object ids or set order, so equal graphs print equally.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.graph import Graph
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import op_def
from pseudoformer.ir.types import DType, Span, TensorType, TupleType


def value_numbers(nodes: Sequence[Node]) -> dict[int, int]:
    """id(node) -> its value number, for `nodes` in Graph.nodes() order."""
    return {id(n): i for i, n in enumerate(nodes)}


def graph_name(graph: Graph) -> str:
    return str(graph.meta.get("entry") or "main")


def format_value(v: Any) -> str:
    """An attribute value as text: floats by repr so they round-trip, dicts by sorted key."""
    if isinstance(v, bool | np.bool_):
        return "true" if v else "false"
    if isinstance(v, np.generic):
        return format_value(v.item())
    if isinstance(v, int | float):
        return repr(v)  # round-trips, and reads 'inf'/'nan' for the mask constants
    if isinstance(v, str):
        return quote(v)
    if isinstance(v, DType):
        return v.value
    if isinstance(v, TensorType | TupleType):
        return str(v)
    if isinstance(v, Span):
        return location(v)
    if isinstance(v, enum.Enum):
        return format_value(v.value)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}={format_value(v[k])}" for k in sorted(v, key=str)) + "}"
    if isinstance(v, np.ndarray):
        return f"array({format_value(v.tolist())}, {v.dtype})"
    return repr(v)


def quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def location(span: Span | None, scope: str = "") -> str:
    parts = [f"{span.file}:{span.line}"] if span is not None else []
    if scope:
        parts.append(scope)
    return "  ".join(parts)


def _ref(n: Node, numbers: dict[int, int], declared: set[int]) -> str:
    if id(n) in declared:
        return f"%{n.attrs['name']}"
    return f"%{numbers[id(n)]}"


def format_node(n: Node, numbers: dict[int, int], declared: set[int], with_locations: bool = True) -> str:
    """One line for one node, without indentation."""
    attrs = dict(n.attrs)
    head = n.op.value
    d = op_def(n.op)
    # What the result type after the colon says is not repeated (a param's type, a constant's dtype),
    # and a leaf's defining attribute reads best inline: param "W_e", const 3.0.
    for a in d.implied:
        attrs.pop(a, None)
    if d.inline is not None and d.inline in attrs:
        head += " " + format_value(attrs.pop(d.inline))
    if n.src:
        head += " " + ", ".join(_ref(s, numbers, declared) for s in n.src)
    if attrs:
        head += " {" + ", ".join(f"{k}={format_value(attrs[k])}" for k in sorted(attrs)) + "}"
    line = f"%{numbers[id(n)]} = {head} : {n.type}"
    loc = location(n.span, n.scope) if with_locations else ""
    return f"{line}  # {loc}" if loc else line


def format_graph(graph: Graph, with_locations: bool = True) -> str:
    nodes = graph.nodes()
    numbers = value_numbers(nodes)
    declared = {id(n) for n in graph.inputs}
    params = ", ".join(f"{n.attrs.get('name')}: {n.type}" for n in graph.inputs)
    results = ", ".join(f"{name}: {n.type}" for name, n in graph.outputs)
    lines = [f"graph {graph_name(graph)}({params}) -> ({results})"]
    for n in nodes:
        if id(n) not in declared:
            lines.append("  " + format_node(n, numbers, declared, with_locations))
    ret = ", ".join(f"{name} = {_ref(n, numbers, declared)}" for name, n in graph.outputs)
    lines.append(f"  return {ret}")
    return "\n".join(lines) + "\n"
