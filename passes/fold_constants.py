"""Constant folding: every float tensor computed from weights alone becomes a weight itself.

GPT-2's tied unembedding Wᵀ, the transposes and concatenations of per-head projections that -O2
makes: they are computed once, at compile time, by the reference interpreter, and the graph reads
the result as a new PARAM ("folded.<i>"). A backend that would otherwise run each such op as a kernel
at load time gains (TVM ran each as an unscheduled kernel: 90 s of the first GPT-2 small compile,
against well under a second in numpy). ONNX Runtime folds initializers itself when a session
starts, so the ONNX pipeline leaves them be and keeps its files' weights under their own names.
Sizes stay in the graph: backends follow them symbolically.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pseudoformer.ir import interpreter
from pseudoformer.ir.graph import Graph
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op
from pseudoformer.passes.rebuild import rebuild


def weight_only(nodes: list[Node]) -> set[int]:
    """ids of the nodes (in topological order) computed from weights and constants alone."""
    static: set[int] = set()
    for n in nodes:
        if n.op in (Op.PARAM, Op.CONST) or (n.src and n.op is not Op.INPUT and all(id(s) in static for s in n.src)):
            static.add(id(n))
    return static


def fold_constants(graph: Graph, weights: Mapping[str, np.ndarray]) -> tuple[Graph, dict[str, np.ndarray]]:
    """The graph with weight-only tensors replaced by new PARAMs, and the weights it now takes."""
    nodes = graph.nodes()
    static = weight_only(nodes)
    c = graph.consumers()
    boundary = [n for n in nodes if id(n) in static and n.op not in (Op.PARAM, Op.CONST)
                and n.dtype.is_float and n.shape != ()
                and (c.is_output(n) or any(id(u) not in static for u in c.of(n)))]
    if not boundary:
        return graph, dict(weights)
    taken = {p.attrs["name"] for p in graph.params()}
    names = {}
    for i, n in enumerate(boundary):
        name = f"folded.{i}"
        while name in taken:
            name += "_"
        names[id(n)] = name
    sub = Graph([], [(names[id(n)], n) for n in boundary], {"entry": "weights"})
    values = interpreter.run(sub, {}, weights)
    out = {**{k: np.asarray(v) for k, v in weights.items()}, **values}

    def replace(n: Node, _src: tuple[Node, ...]) -> Node | None:
        if id(n) in names:
            return Node(Op.PARAM, (), {"name": names[id(n)], "type": n.type}, span=n.span, scope=n.scope)
        return None

    folded, _ = rebuild(graph, replace)
    used = {p.attrs["name"] for p in folded.params()}
    return folded, {k: v for k, v in out.items() if k in used}
