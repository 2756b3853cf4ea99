"""A one-hot sum that picks one entry per output → one gather_elements (take_along_axis).

    Σ_a cast(u == w) ⊙ p     → gather_elements(p, w; a)      (squeezed on a unless the sum keeps it)

`u` is a range 0 … n−1 along a (unit elsewhere), `w` an int64 index with a unit axis a, and p runs over the n
entries of a. The frontend writes an index that is itself per example into per-example data this way, the
training loss `−Σ_t log P[x[t+1], t]` above all (frontend/expressions/computed_index.pick): the sum reads the
one-hot [.., n, ..] and p and builds their product, three tensors of p's size (for a language model's loss,
[batch, ℓ, N_V] each), and its cotangent is the one-hot times the output's, another; the gather reads one entry
per output, and its cotangent is a scatter-add into zeros (SCATTER_ADD_ELEMENTS).

Check: w is the frontend's checked index, a GATHER from the range itself (arange[w]): a w outside [0, n) fails
there, so the two forms agree on every input. (For a w outside the range the one-hot picks nothing and gives
0, where a gather fails: an unchecked w is left as a one-hot sum.)
"""

from __future__ import annotations

from typing import Any

from pseudoformer.ir import Node, Op
from pseudoformer.passes.rule import Context, Rule


def _range_along(u: Node, axis: int, rank: int) -> bool:
    """u is arange(n) laid along `axis` of a rank-`rank` shape (unit axes elsewhere, leading ones implied)."""
    dims = (1,) * (rank - u.type.rank) + tuple(u.shape)
    if any(d != 1 for k, d in enumerate(dims) if k != axis):
        return False
    while u.op is Op.UNSQUEEZE:
        u = u.src[0]
    return u.op is Op.ARANGE


def _index(h: Node, axis: int) -> tuple[Node, Node] | None:
    """(u, w) if h = cast(u == w) is one-hot along `axis` with u the range and w unit on the axis."""
    if h.op is not Op.CAST or h.src[0].op is not Op.EQ:
        return None
    rank = h.type.rank
    for u, w in (h.src[0].src, reversed(h.src[0].src)):
        dims = (1,) * (rank - w.type.rank) + tuple(w.shape)
        if w.dtype is u.dtype and dims[axis] == 1 and _range_along(u, axis, rank):
            return u, w
    return None


def _match(n: Node, src: tuple[Node, ...], ctx: Context) -> Any:
    if n.op is not Op.REDUCE_SUM or len(n.attrs["axes"]) != 1 or src[0].op is not Op.MUL:
        return None
    prod = src[0]
    rank = prod.type.rank
    axis = n.attrs["axes"][0] % rank
    for h, p in (prod.src, reversed(prod.src)):
        pick = _index(h, axis)
        if pick is not None and p.type.rank == rank and p.shape[axis] == prod.shape[axis] and p.dtype.is_float:
            u, w = pick
            return p, w, axis, n.attrs.get("keepdims", False)
    return None


def _check(m: Any, ctx: Context) -> str | None:
    p, w, axis, _ = m
    while w.op is Op.UNSQUEEZE:
        w = w.src[0]
    checked = w.op is Op.GATHER and w.src[0].op is Op.ARANGE and w.src[0].shape == (p.shape[axis],)
    if not checked:
        return ("the index is not checked against the axis (for an index outside it the one-hot sum picks "
                "nothing, a gather fails)")
    return None


def _rewrite(m: Any, n: Node) -> Node:
    p, w, axis, keepdims = m

    def make(op: Op, *src: Node, **attrs: Any) -> Node:
        return Node.at(n, op, src, attrs)

    lead = p.type.rank - w.type.rank
    idx = make(Op.UNSQUEEZE, w, axes=list(range(lead))) if lead else w
    out = make(Op.GATHER_ELEMENTS, p, idx, axis=axis)
    return out if keepdims else make(Op.SQUEEZE, out, axes=[axis])


RULE = Rule("one_hot_pick", _match, _rewrite, _check)
