"""Decompose the ops a backend has no kernel for into their formulas (the `decompose` of each op's OpDef).

A backend says which nodes it lowers (`accepts`); every other node whose op has a decomposition is
replaced by it, and the pass repeats until nothing changes, since a formula may use an op the
backend also lacks (GELU's erf). Attention by parts, the RMS norm before ONNX opset 23 and GELU
before opset 20 all come from here: each formula exists once, in the op's own module.

An op with several results (cached attention) decomposes into a tuple of nodes; the `get`s of it
become those nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pseudoformer.ir import Graph, Node, Op
from pseudoformer.ir.node import NodeBuilder
from pseudoformer.ir.ops import op_def


def decompose(graph: Graph, accepts: Callable[[Node], bool]) -> tuple[Graph, bool]:
    """`graph` with every node that `accepts` refuses and that has a decomposition replaced by it."""
    changed = False
    for _ in range(32):
        graph, again = _once(graph, accepts)
        changed = changed or again
        if not again:
            break
    return graph, changed


def _once(graph: Graph, accepts: Callable[[Node], bool]) -> tuple[Graph, bool]:
    memo: dict[int, Any] = {}
    changed = False
    for n in graph.nodes():
        if n.op is Op.INPUT:
            memo[id(n)] = n
            continue
        if n.op is Op.GET and isinstance(memo[id(n.src[0])], tuple):
            memo[id(n)] = memo[id(n.src[0])][n.attrs["index"]]
            continue
        src = tuple(memo[id(s)] for s in n.src)
        same = all(a is b for a, b in zip(src, n.src, strict=True))
        new = n if same else Node.at(n, n.op, src, dict(n.attrs), type=n.type)
        formula = op_def(n.op).decompose
        if formula is not None and not accepts(new):
            new = formula(new, NodeBuilder(n))
            changed = True
        changed = changed or new is not n
        memo[id(n)] = new
    outputs = [(name, memo[id(n)]) for name, n in graph.outputs]
    return Graph(inputs=list(graph.inputs), outputs=outputs, meta=dict(graph.meta)), changed
