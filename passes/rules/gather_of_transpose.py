"""A gather from a transpose → the gather from the stored tensor, its (smaller) result transposed.

    gather(transpose(W; p), i; k)   ⟶  transpose(gather(W, i; p[k]); q)
    q puts gather(W, i; p[k])'s axes in the order of the left side's: W's axes as p orders them, i's at k

The paper stores the embedding as W_e ∈ ℝ^{d_e × N_V} and looks a token up as the column W_e[:, x]; in the
row-major layout that is a gather of rows from W_eᵀ, a transpose of the whole table ([N_V, d_e], 98 MiB for
GPT-2's vocabulary) that a training step computes every time, since W_e is an input that changes each step.
Its VJP then scatter-adds the rows' cotangent into zeros of [N_V, d_e] and transposes the sum back: two more
tables. Gathered from W_e along its own axis, the transpose moves the [batch, ℓ, d_e] result instead, and
the cotangent is a scatter-add into zeros of W_e's shape, which rules/scatter_add_into.py then writes into
W_e's other cotangent (the tied unembedding's gradient) without any zeros.

Run on a loss graph before the autodiff (the "training" pipeline). Check: none is needed (the identity holds
for every permutation and index), but the gather must read the transpose as its data, not as its index.
"""

from __future__ import annotations

from dataclasses import dataclass

from pseudoformer.ir import Node, Op
from pseudoformer.passes.rule import Context, Rule


@dataclass
class Match:
    w: Node
    perm: list[int]
    axis: int  # the gather's axis, on the transpose
    index_rank: int


def match(n: Node, src: tuple[Node, ...], ctx: Context) -> Match | None:
    if n.op is not Op.GATHER or src[0].op is not Op.TRANSPOSE:
        return None
    t, idx = src
    return Match(t.src[0], list(t.attrs["perm"]), n.attrs["axis"] % t.type.rank, idx.type.rank)


def rewrite(m: Match, root: Node) -> Node:
    k, r = m.axis, m.index_rank
    at = m.perm[k]
    gathered = Node.at(root, Op.GATHER, (m.w, root.src[1]), {"axis": at})
    # axes of `gathered`: W's axes before `at`, the index's r axes, W's axes after `at`
    where = {("w", j): j if j < at else j + r - 1 for j in range(len(m.perm)) if j != at}
    where.update({("i", j): at + j for j in range(r)})
    wanted = [("w", p) for p in m.perm[:k]] + [("i", j) for j in range(r)] + [("w", p) for p in m.perm[k + 1:]]
    q = [where[a] for a in wanted]
    if q == list(range(len(q))):
        return gathered
    return Node.at(root, Op.TRANSPOSE, (gathered,), {"perm": q})


RULE = Rule("gather_of_transpose", match, rewrite)
