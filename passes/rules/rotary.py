"""The rotary position embedding (Su et al., 2021) in HuggingFace's "rotate half" pairing → one ROTARY.

    x₁ = x[0 : d/2], x₂ = x[d/2 : d]                    slice(x, 0, d/2), slice(x, d/2, d) along axis a
    Y  = [x₁ ⊙ c − x₂ ⊙ s ; x₂ ⊙ c + x₁ ⊙ s]            concat(sub(…), add(…), axis=a)
      ⟶  rotary(x, c, s; axis=a)

This is what models/llama.alg's RoPE elaborates to: its lines Y[i, t] ← X[i, t] cos θ[i, t] −
X[i + d/2, t] sin θ[i, t] and Y[i + d/2, t] ← … for i ∈ [d/2] become the two halves and their
concatenation, with c = cos θ and s = sin θ computed once from the positions. c and s are whatever the
source computed (the rewrite is exact for any c, s): they must be the same two values in both halves
and broadcast against x₁. Either operand order of ⊙ and of the + matches.

Refused, with the reason: halves that are not the two halves of one x along the concatenation's
axis, angles that differ between the halves, and a half or product something else also reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pseudoformer.ir import Node, Op
from pseudoformer.ir.types import broadcast_shapes
from pseudoformer.passes.rule import Context, Rule
from pseudoformer.passes.rules.matching import const_value, describe, escaping


@dataclass
class Match:
    src: tuple[Node, ...]
    axis: int
    x: Node | None = None
    cos: Node | None = None
    sin: Node | None = None
    interior: list[Node] = field(default_factory=list)
    problem: str | None = None


def _products(n: Node) -> tuple[Node, Node] | None:
    """(a, b) of a·b ± c·d: the two MUL operands of n, in order, or None."""
    if not all(s.op is Op.MUL for s in n.src):
        return None
    return n.src[0], n.src[1]


def _pair(prod: Node, half: Node) -> Node | None:
    """The factor of prod that multiplies `half`, if `half` is one of its factors."""
    a, b = prod.src
    return b if a is half else a if b is half else None


def _half(n: Node, axis: int) -> tuple[Node, int] | None:
    """n = slice(x, start, start + len) along axis with constant bounds: (x, start)."""
    if n.op is not Op.SLICE or n.attrs["axis"] % n.type.rank != axis:
        return None
    start, stop = const_value(n.src[1]), const_value(n.src[2])
    if start is None or stop is None:
        return None
    return n.src[0], int(start)


def _halves(first: Node, second: Node, axis: int) -> tuple[Node, str | None] | None:
    """first and second as the first and second half of one x along axis."""
    a, b = _half(first, axis), _half(second, axis)
    if a is None or b is None:
        return None
    (x, start1), (x2, start2) = a, b
    d = x.shape[axis]
    if x2 is not x:
        return x, "the two halves are slices of different values"
    if not isinstance(d, int) or first.shape[axis] != d // 2 or second.shape[axis] != d // 2 or d % 2:
        return x, f"the halves are not halves of axis {axis} of {x.type}"
    if (start1, start2) != (0, d // 2):
        return x, f"the slices start at {start1} and {start2}, not at 0 and {d // 2}"
    return x, None


def match(n: Node, src: tuple[Node, ...], ctx: Context) -> Match | None:
    if n.op is not Op.CONCAT or len(src) != 2 or not n.dtype.is_float:
        return None
    top, bottom = src
    if top.op is not Op.SUB or bottom.op is not Op.ADD:
        return None
    tp, bp = _products(top), _products(bottom)
    if tp is None or bp is None:
        return None
    axis = n.attrs["axis"] % n.type.rank
    m = Match(src=src, axis=axis, interior=[top, bottom, *tp, *bp])
    # top = x₁·c − x₂·s: try each factor of the first product as x₁ and of the second as x₂
    for x1 in tp[0].src:
        for x2 in tp[1].src:
            found = _halves(x1, x2, axis)
            if found is None:
                continue
            x, problem = found
            m.x, m.cos, m.sin = x, _pair(tp[0], x1), _pair(tp[1], x2)
            m.interior += [x1, x2]
            if problem is not None:
                m.problem = problem
                return m
            # bottom = x₂·c + x₁·s, in either order
            for p, q in (bp, bp[::-1]):
                c2, s2 = _pair(p, x2), _pair(q, x1)
                if c2 is not None and s2 is not None:
                    if c2 is not m.cos or s2 is not m.sin:
                        m.problem = "the second half is rotated by other angles than the first"
                    return m
            m.problem = "the second half is not x₂ ⊙ cos + x₁ ⊙ sin of the first half's x₁, x₂"
            return m
    return None


def check(m: Match, ctx: Context) -> str | None:
    if m.problem is not None:
        return m.problem
    assert m.x is not None and m.cos is not None and m.sin is not None
    half = m.src[0].shape
    for what, t in (("cos", m.cos), ("sin", m.sin)):
        if t.dtype != m.x.dtype or broadcast_shapes(t.shape, half) != half:
            return f"the {what} factor {t.type} does not broadcast against the half {list(half)}"
    leak = escaping(ctx, m.src, m.interior)
    if leak is not None:
        return f"an intermediate of the rotation is used elsewhere: {describe(leak)}"
    return None


def rewrite(m: Match, root: Node) -> Node:
    out = Node.at(root, Op.ROTARY, (m.x, m.cos, m.sin), {"axis": m.axis})
    assert out.type == root.type, f"rotary fusion changed the type {root.type} to {out.type}"
    return out


RULE = Rule("rotary", match, rewrite, check)
