"""A scatter-add into zeros, added to (or subtracted from) a tensor of its shape → a scatter-add into that tensor.

    x + scatter_add(0, i, u)    ⟶  scatter_add(x, i, u)           (either order; scatter_add or _elements)
    scatter_add(0, i, u) − x    ⟶  scatter_add(−x, i, u)
    x − scatter_add(0, i, u)    ⟶  scatter_add(x, i, −u)

The VJPs of a gather and of a per-position pick write their cotangent as a scatter-add into zeros of the
data's size (ir/ops/gather.py, ir/ops/gather_elements.py), and the autodiff then adds it to the data's other
cotangents. For a language model's loss the zeros, the scatter and the difference are each [batch, ℓ, N_V]
(196 MiB for GPT-2 at batch 8) and all three live at once; scattered into the other term, the updates are
added where they belong and one tensor of that size is written. (For −x the negation moves onto x's smaller
factor where x is a product with a broadcast operand: softmax(z) · Σ ct of the log-softmax's VJP.)

Check (why it refused): x has the scatter's shape and dtype (a broadcast x would change the result's
shape), and the scatter is read only here (otherwise it stays computed, and the rewrite adds a second one).
"""

from __future__ import annotations

from dataclasses import dataclass

from pseudoformer.ir import Node, Op
from pseudoformer.passes.rule import Context, Rule
from pseudoformer.passes.rules.scatter_sum import is_zeros

SCATTERS = (Op.SCATTER_ADD, Op.SCATTER_ADD_ELEMENTS)


@dataclass
class Match:
    scatter: Node
    other: Node
    sign: int  # +1: x + s; -1 on x: s − x; -1 on u: x − s
    negate_updates: bool


def match(n: Node, src: tuple[Node, ...], ctx: Context) -> Match | None:
    if n.op not in (Op.ADD, Op.SUB):
        return None
    a, b = src
    for s, x, first in ((a, b, True), (b, a, False)):
        if s.op in SCATTERS and is_zeros(s.src[0]):
            if n.op is Op.ADD:
                return Match(s, x, 1, False)
            return Match(s, x, -1 if first else 1, not first)
    return None


def check(m: Match, ctx: Context) -> str | None:
    if m.other.type != m.scatter.type:
        return f"the other term ({m.other.type}) is not of the scatter's shape and dtype ({m.scatter.type})"
    if not ctx.used_once(m.scatter):
        return "the scatter is also read elsewhere, so writing it into the other term would compute it twice"
    return None


def _negated(x: Node, root: Node) -> Node:
    def neg(v: Node) -> Node:
        return Node.at(root, Op.NEG, (v,), {})

    if x.op is Op.MUL:  # negate the smaller factor: one pass over [.., 1] rather than over x
        p, q = x.src
        if q.type.shape != x.type.shape or p.type.shape != x.type.shape:
            small_first = p.type.shape != x.type.shape
            src = (neg(p), q) if small_first else (p, neg(q))
            return Node.at(x, Op.MUL, src, {})
    return neg(x)


def rewrite(m: Match, root: Node) -> Node:
    data, idx, upd = m.scatter.src
    into = _negated(m.other, root) if m.sign < 0 else m.other
    if m.negate_updates:
        upd = Node.at(root, Op.NEG, (upd,), {})
    return Node.at(root, m.scatter.op, (into, idx, upd), dict(m.scatter.attrs))


RULE = Rule("scatter_add_into", match, rewrite, check)
