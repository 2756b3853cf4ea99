"""Common subexpression elimination: nodes with the same op, operands and attributes are one node.

The literal lowering repeats work the paper writes twice — `(e − m)` in lines 2 and 3 of
layer_norm, the same causal mask for every head — and CSE shares it.
"""

from __future__ import annotations

from pseudoformer.ir import Graph, Node
from pseudoformer.passes.rebuild import clone, rebuild


def cse(graph: Graph) -> tuple[Graph, bool]:
    seen: dict[tuple, Node] = {}

    def visit(n: Node, src: tuple[Node, ...]) -> Node:
        key = (n.op, tuple(id(s) for s in src), _freeze(n.attrs))
        if key not in seen:
            seen[key] = n if all(a is b for a, b in zip(src, n.src, strict=True)) else clone(n, src)
        return seen[key]

    return rebuild(graph, visit)


def _freeze(v: object) -> object:
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, float) and v != v:  # nan is a value like any other here
        return ("nan",)
    return v
