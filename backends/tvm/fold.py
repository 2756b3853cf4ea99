"""Weight preprocessing in numpy, before TVM sees the graph: folding and packing.

Folding: every tensor computed from weights alone (GPT-2's tied unembedding Wᵀ, the transposes
and concatenations that -O2 makes of per-head projections) is computed once, here, by the
reference interpreter, and becomes a weight itself. TVM could do it (FoldConstant, or
LiftTransformParams), but it runs each such op as an unscheduled kernel, one at a time: 90 s of
the first GPT-2 small compile went there, against well under a second in numpy.

Packing: see packing.py; the packed copy of a weight is made here too, for the same reason.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pseudoformer.ir import interpreter
from pseudoformer.ir.graph import Graph
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op
from pseudoformer.passes.rebuild import rebuild


def fold_weights(graph: Graph, weights: Mapping[str, np.ndarray]) -> tuple[Graph, dict[str, np.ndarray]]:
    """The graph with weight-only tensors replaced by new PARAMs, and the weights it now takes."""
    nodes = graph.nodes()
    static: set[int] = set()
    for n in nodes:
        if n.op in (Op.PARAM, Op.CONST) or (n.src and n.op is not Op.INPUT and all(id(s) in static for s in n.src)):
            static.add(id(n))
    users: dict[int, list[Node]] = {}
    for n in nodes:
        for s in n.src:
            users.setdefault(id(s), []).append(n)
    outputs = {id(n) for _, n in graph.outputs}
    # Sizes stay in the graph (the lowering follows them symbolically); only float tensors fold.
    boundary = [n for n in nodes if id(n) in static and n.op not in (Op.PARAM, Op.CONST)
                and n.dtype.is_float and n.shape != ()
                and (id(n) in outputs or any(id(u) not in static for u in users.get(id(n), [])))]
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


def pack(w: np.ndarray, panel: int) -> np.ndarray:
    """W [K, N] → Wp [⌈N/panel⌉, K, panel], zero-padded: one panel of columns contiguous per k."""
    k, n = w.shape
    panels = -(-n // panel)
    padded = np.zeros((k, panels * panel), np.float32)
    padded[:, :n] = w
    return np.ascontiguousarray(padded.reshape(k, panels, panel).transpose(1, 0, 2))
