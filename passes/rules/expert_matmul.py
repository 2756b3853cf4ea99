"""A product with each row's own expert matrix (a mixture of experts) → one EXPERT_MATMUL.

    Σ_j W[r, i, j] x[j]      reduce_sum(mul(transpose?(gather(W, r, axis=0)), x'), one axis)
      ⟶  transpose?(expert_matmul(W or Wᵀ, r, x))

W has three indices [E, n, m] and r (int64, any shape I) picks one matrix per row, so the gather is I × [n, m];
the sum runs over one of W's last two axes (j), and x' (the other operand, any layout) has a unit or missing
axis where W's other axis (i) is. The frontend writes `Σ_j W_1[R[c, t], i, j] X[j, t]` this way: it copies one
matrix per row. EXPERT_MATMUL computes the same sum without the copies (backends/onnx/lowerings/experts.py groups
the rows by expert).

Refused, with the reason: a gather that something else also reads (it is computed anyway), and an x' that
varies along W's other axis (not a product with a matrix).
"""

from __future__ import annotations

from dataclasses import dataclass

from pseudoformer.ir import Node, Op
from pseudoformer.ir.node import NodeBuilder
from pseudoformer.passes.rule import Context, Rule
from pseudoformer.passes.rules.matching import describe, escaping


@dataclass
class Match:
    src: tuple[Node, ...]
    mul: Node
    moved: Node | None  # the transpose between the gather and the product, if any
    gather: Node
    other: Node  # x'
    perm: list[int]  # the product's axis p is the gather's axis perm[p]
    axis: int  # the summed axis of the product
    j: int  # W's axis the sum runs over: 2 (Σ_j W[r, i, j] x[j]) or 1 (Σ_i W[r, i, j] x[i]); -1 neither


def match(n: Node, src: tuple[Node, ...], ctx: Context) -> Match | None:
    if n.op is not Op.REDUCE_SUM or len(n.attrs["axes"]) != 1 or n.attrs.get("keepdims", False):
        return None
    mul = src[0]
    if mul.op is not Op.MUL:
        return None
    for i in (0, 1):
        a, other = mul.src[i], mul.src[1 - i]
        moved = a if a.op is Op.TRANSPOSE else None
        g = a.src[0] if moved is not None else a
        if g.op is Op.GATHER and g.attrs["axis"] in (0, -3) and g.src[0].type.rank == 3 \
                and g.src[1].dtype.value == "int64" and a.type.rank == mul.type.rank:
            perm = list(moved.attrs["perm"]) if moved is not None else list(range(g.type.rank))
            axis = n.attrs["axes"][0] % mul.type.rank
            j = {g.type.rank - 1: 2, g.type.rank - 2: 1}.get(perm[axis], -1)
            return Match(src, mul, moved, g, other, perm, axis, j)
    return None


def _inverse(perm: list[int]) -> list[int]:
    return [perm.index(g) for g in range(len(perm))]


def check(m: Match, ctx: Context) -> str | None:
    rank = m.mul.type.rank
    if m.j < 0:
        return "the sum runs over the rows' axes, not over an axis of the experts' matrices"
    if m.other.type.rank > rank:
        return f"the product's other operand {describe(m.other)} has more axes than the gathered matrices"
    padded = (1,) * (rank - m.other.type.rank) + m.other.type.shape
    kept = m.gather.src[1].type.rank + (1 if m.j == 1 else 0)  # the gather's axis of W's other index
    if padded[_inverse(m.perm)[kept]] != 1:
        return f"{describe(m.other)} varies along the experts' other axis: not a product with a matrix"
    leak = escaping(ctx, m.src, [m.mul, m.gather] + ([m.moved] if m.moved is not None else []))
    if leak is not None:
        return f"the gathered matrices are used elsewhere: {describe(leak)}"
    return None


def rewrite(m: Match, root: Node) -> Node:
    node = NodeBuilder(root)

    rank, routes = m.mul.type.rank, m.gather.src[1].type.rank
    w = m.gather.src[0]
    other = m.other  # as the gather's axes: padded to full rank, then permuted by perm's inverse
    if other.type.rank < rank:
        other = node(Op.UNSQUEEZE, other, axes=list(range(rank - other.type.rank)))
    if m.perm != list(range(rank)):
        other = node(Op.TRANSPOSE, other, perm=_inverse(m.perm))
    x = node(Op.SQUEEZE, other, axes=[routes + (1 if m.j == 1 else 0)])  # the routes' axes, then the summed one
    if m.j == 1:
        w = node(Op.TRANSPOSE, w, perm=[0, 2, 1])
    out = node(Op.EXPERT_MATMUL, w, m.gather.src[1], x)  # the routes' axes, then W's other axis
    order = [min(g, routes) for g in (m.perm[p] for p in range(rank) if p != m.axis)]
    if order != list(range(len(order))):
        out = node(Op.TRANSPOSE, out, perm=order)
    assert out.type == root.type, f"expert_matmul fusion changed the type {root.type} to {out.type}"
    return out


RULE = Rule("expert_matmul", match, rewrite, check)
