"""log ∘ softmax → a stable log-softmax, through the picking between them.

    log(moves(softmax(z; a)))                          → moves(log_softmax(z; a))
    log(Σ_{a'} onehot ⊙ moves(softmax(z; a)))          → Σ_{a'} onehot ⊙ moves(log_softmax(z; a))

log_softmax(z; a) = z − m − log Σ_a exp(z − m), m = max_a z, is one op (ir/ops/log_softmax.py), whose VJP
ct − softmax(z) Σ ct does not run through the max as the formula's would.

`moves` is any chain of ops that only move values (slice, gather, gather_elements, transpose, reshape,
(un)squeeze); `onehot` is cast(u == w) where u is a range along a' and w is constant along a', so each sum
picks one entry and log commutes with it. The loss `−Σ_t log P[x[t+1], t]` of the training algorithms is
the second form as the frontend writes it, and the first after rules/one_hot_pick.py made its pick one
gather_elements (the training pipeline runs that rule first). The probability of a token far below the
largest underflows to 0 in float32, and log 0 = −∞ with an infinite gradient; the log-softmax keeps both
finite. (A token id outside the
range, which the onehot picks nothing for, gives 0 instead of −∞: training checks ids beforehand.)
"""

from __future__ import annotations

from typing import Any

from pseudoformer.ir import Node, Op
from pseudoformer.passes.rule import Context, Rule

MOVES = (Op.SLICE, Op.GATHER, Op.GATHER_ELEMENTS, Op.TRANSPOSE, Op.RESHAPE, Op.UNSQUEEZE, Op.SQUEEZE)


def _moved_softmax(n: Node) -> list[Node] | None:
    """The chain [n, …, softmax] if n moves the values of a softmax, else None."""
    chain = [n]
    while chain[-1].op in MOVES:
        chain.append(chain[-1].src[0])
    return chain if chain[-1].op is Op.SOFTMAX else None


def _is_range_along(u: Node, axis: int, rank: int) -> bool:
    while u.op is Op.UNSQUEEZE:
        u = u.src[0]
    return u.op is Op.ARANGE


def _onehot_along(h: Node, axis: int) -> bool:
    if h.op is not Op.CAST or h.src[0].op is not Op.EQ:
        return False
    rank = h.type.rank
    u, w = h.src[0].src
    for a, b in ((u, w), (w, u)):
        pad = rank - a.type.rank, rank - b.type.rank
        a_dims = (1,) * pad[0] + tuple(a.shape)
        b_dims = (1,) * pad[1] + tuple(b.shape)
        if b_dims[axis] == 1 and all(d == 1 for i, d in enumerate(a_dims) if i != axis) \
                and _is_range_along(a, axis, rank):
            return True
    return False


def _match(n: Node, src: tuple[Node, ...], ctx: Context) -> Any:
    if n.op is not Op.LOG:
        return None
    (x,) = src
    chain = _moved_softmax(x)
    if chain is not None:
        return (None, chain)
    if x.op is not Op.REDUCE_SUM or len(x.attrs["axes"]) != 1 or x.src[0].op is not Op.MUL:
        return None
    axis = x.attrs["axes"][0] % x.src[0].type.rank
    for h, p in (x.src[0].src, reversed(x.src[0].src)):
        chain = _moved_softmax(p)
        if chain is not None and h.type == p.type and _onehot_along(h, axis):
            return ((x, h), chain)
    return None


def log_softmax(z: Node, axis: int, like: Node) -> Node:
    def make(op: Op, *src: Node, **attrs: Any) -> Node:
        return Node.at(like, op, src, attrs)

    return make(Op.LOG_SOFTMAX, z, axis=axis)


def _rewrite(m: Any, n: Node) -> Node:
    pick, chain = m
    soft = chain[-1]
    out = log_softmax(soft.src[0], soft.attrs["axis"] % soft.type.rank, n)
    for mover in reversed(chain[:-1]):
        out = Node.at(mover, mover.op, (out, *mover.src[1:]), dict(mover.attrs))
    if pick is None:
        return out
    total, onehot = pick
    picked = Node.at(total, Op.MUL, (onehot, out))
    return Node.at(total, Op.REDUCE_SUM, (picked,), dict(total.attrs))


RULE = Rule("log_softmax", _match, _rewrite)
