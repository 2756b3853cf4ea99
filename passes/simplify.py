"""Algebraic simplification, each rule exact in floating point.

  transpose(transpose(x, p), q)  →  transpose(x, p∘q), or x when that is the identity
  transpose(x, identity)          →  x
  squeeze(unsqueeze(x, a), a)     →  x
"""

from __future__ import annotations

from pseudoformer.ir import Graph, Node, Op
from pseudoformer.passes.rebuild import rebuild


def simplify(graph: Graph) -> tuple[Graph, bool]:
    return rebuild(graph, _rule)


def _rule(n: Node, src: tuple[Node, ...]) -> Node | None:
    if n.op is Op.TRANSPOSE:
        (x,) = src
        perm = list(n.attrs["perm"])
        if perm == sorted(perm):
            return x
        if x.op is Op.TRANSPOSE:
            inner = x.attrs["perm"]
            combined = [inner[p] for p in perm]
            if combined == sorted(combined):
                return x.src[0]
            return Node.at(n, Op.TRANSPOSE, (x.src[0],), {"perm": combined})
    if n.op is Op.SQUEEZE:
        (x,) = src
        if x.op is Op.UNSQUEEZE and sorted(x.attrs["axes"]) == sorted(n.attrs["axes"]):
            return x.src[0]
    return None
