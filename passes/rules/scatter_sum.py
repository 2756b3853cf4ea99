"""The sum of a scatter-add into zeros, along the scattered axis → the sum of its updates.

    Σ_a scatter_add_elements(0, i, u; a)   reduce_sum(scatter_add_elements(expand(0, z), i, u; a); axes=[a])
                                                    ⟶  reduce_sum(u; axes=[a])

Scattering along a moves each update within its own line along a (the other axes of u are the data's), so
the line's sum is the sum of what was added into it. The log-softmax's VJP over the loss's pick writes
exactly this (ir/ops/log_softmax.py: ct − softmax(z) · Σ ct, ct the pick's cotangent, a scatter-add into
zeros over [batch, ℓ, N_V]); summing the updates instead reads [batch, ℓ, 1], and leaves the scatter read
once, so that rules/scatter_add_into.py can write it into the other term (no zeros of the vocabulary's size).

Check (why it refused): the data must be zeros (an expand of the constant 0).
"""

from __future__ import annotations

from dataclasses import dataclass

from pseudoformer.ir import Node, Op
from pseudoformer.passes.rule import Context, Rule


def is_zeros(n: Node) -> bool:
    """expand(0, like): what the VJPs write for zeros (ir/ops/cotangents.zeros_like)."""
    c = n.src[0] if n.op is Op.EXPAND else n
    return c.op is Op.CONST and c.attrs["value"] == 0


@dataclass
class Match:
    scatter: Node
    axis: int


def match(n: Node, src: tuple[Node, ...], ctx: Context) -> Match | None:
    if n.op is not Op.REDUCE_SUM or src[0].op is not Op.SCATTER_ADD_ELEMENTS or len(n.attrs["axes"]) != 1:
        return None
    s = src[0]
    rank = s.type.rank
    if n.attrs["axes"][0] % rank != s.attrs["axis"] % rank:
        return None
    return Match(s, s.attrs["axis"] % rank)


def check(m: Match, ctx: Context) -> str | None:
    if not is_zeros(m.scatter.src[0]):
        return "the scatter adds into data that is not zeros, whose sum would be needed too"
    return None


def rewrite(m: Match, root: Node) -> Node:
    return Node.at(root, Op.REDUCE_SUM, (m.scatter.src[2],), {**root.attrs, "axes": [m.axis]})


RULE = Rule("scatter_sum", match, rewrite, check)
