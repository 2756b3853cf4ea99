"""A pick from a slice → the pick from the whole, then the slice of the picks.

    gather_elements(slice(X, s, e; b), w; a)   → slice(gather_elements(X, w'; a), s, e; b)      (a ≠ b)
    w' = pad(w; b)                              w at the sliced positions of zeros, X's length along b

The training loss picks `P[x[t+1], t]` for t < ℓ, from the first ℓ − 1 positions of the log-softmax: the slice
is a copy of [batch, ℓ − 1, N_V] and its cotangent puts [batch, ℓ − 1, N_V] back into zeros of [batch, ℓ, N_V],
two tensors of the vocabulary's size that torch (which gathers from a view) does not build. Picked from the whole
with the index padded (any index in range does: 0), the slice moves [batch, ℓ − 1, 1] picks.

Check: w has the slice's sizes off a (no broadcast, so w' fits X off a) and one pick along a, and the slice is
along another axis.
"""

from __future__ import annotations

from typing import Any

from pseudoformer.ir import DType, Node, Op
from pseudoformer.passes.rule import Context, Rule


def _match(n: Node, src: tuple[Node, ...], ctx: Context) -> Any:
    if n.op is not Op.GATHER_ELEMENTS or src[0].op is not Op.SLICE:
        return None
    return src[0], src[1], n.attrs["axis"] % n.type.rank


def _check(m: Any, ctx: Context) -> str | None:
    cut, w, a = m
    b = cut.attrs["axis"] % cut.type.rank
    if a == b:
        return "the slice is along the picked axis"
    if w.shape[a] != 1:
        return "more than one pick per output along the axis"
    if any(w.shape[k] != cut.shape[k] for k in range(cut.type.rank) if k != a):
        return "the index is broadcast against the slice"
    return None


def _rewrite(m: Any, n: Node) -> Node:
    cut, w, a = m
    x, start, stop = cut.src
    b = cut.attrs["axis"] % cut.type.rank

    def make(op: Op, *src: Node, **attrs: Any) -> Node:
        return Node.at(n, op, src, attrs)

    def const(k: int) -> Node:
        return make(Op.CONST, value=k, dtype=DType.int64)

    like = make(Op.SLICE, x, const(0), const(1), axis=a, dim=1)  # X's shape with 1 on a, read for its shape
    first = start
    if not (start.op is Op.CONST and start.attrs["value"] >= 0):  # a start from the end counts from the size
        size = x.shape[b]
        count = const(size) if isinstance(size, int) else make(Op.DIM, x, axis=b)
        first = make(Op.WHERE, make(Op.LT, start, const(0)), make(Op.ADD, start, count), start)
    whole = make(Op.PAD, w, like, first, axis=b)
    picked = make(Op.GATHER_ELEMENTS, x, whole, axis=a)
    return make(Op.SLICE, picked, start, stop, axis=b, dim=cut.attrs["dim"])


RULE = Rule("pick_before_slice", _match, _rewrite, _check)
