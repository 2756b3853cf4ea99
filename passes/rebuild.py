"""Rebuild a graph node by node, in topological order, letting a function replace nodes.

Nodes are immutable in spirit: a pass never edits a node another graph may share; it makes new
ones. `rebuild` hands each node, with its operands already rebuilt, to `fn`, which returns a
replacement or None to keep it (cloned only when an operand changed).
"""

from __future__ import annotations

from collections.abc import Callable

from pseudoformer.ir import Graph, Node, Op


def clone(n: Node, src: tuple[Node, ...]) -> Node:
    return Node.at(n, n.op, src, dict(n.attrs), type=n.type)


def rebuild(graph: Graph, fn: Callable[[Node, tuple[Node, ...]], Node | None],
            origins: dict[int, Node] | None = None) -> tuple[Graph, bool]:
    """`origins`, if given, is filled with id(new node) → the input-graph node it replaces."""
    mapping: dict[int, Node] = {}
    changed = False
    for n in graph.nodes():
        src = tuple(mapping[id(s)] for s in n.src)
        if n.op is Op.INPUT:
            mapping[id(n)] = n
            continue
        new = fn(n, src)
        if new is None:
            new = n if all(a is b for a, b in zip(src, n.src, strict=True)) else clone(n, src)
        changed = changed or new is not n
        mapping[id(n)] = new
        if origins is not None:
            origins.setdefault(id(new), n)
    outputs = [(name, mapping[id(n)]) for name, n in graph.outputs]
    return Graph(inputs=list(graph.inputs), outputs=outputs, meta=dict(graph.meta)), changed
