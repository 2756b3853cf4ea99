"""RMS normalisation (Zhang & Sennrich 2019; T5, LLaMA) → one RMS_NORM.

    r = Σ_i e[i]² / d                       reduce_sum(div(e · e, d), [a])  or  reduce_mean(e², [a])
    ê = e / √(r [+ ε]) ⊙ γ                   mul(div(e, √(r + ε)), γ)
      ⟶  rms_norm(e, γ; axis=a, eps=ε or 0.0)

The mean is recognised as in layer_norm.py (reduce_mean, or a sum of quotients, or a quotient of
a sum, by d or times 1/d), brought back to e's rank by keepdims or unsqueeze(·, [a]). Either
operand order of ⊙ and + ε matches. A layer norm is an RMS norm of e − m plus β; this rule leaves
e − m alone, so that layer_norm's rule, which matches at the + β, fuses the whole of it.

Refused, with the reason: a divisor that is not the size of axis a, an ε that is not a scalar
constant, a γ that is not a vector over axis a, and an intermediate (the mean square, the root,
e/√…) that something outside the formula also reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from pseudoformer.ir import Node, Op
from pseudoformer.passes.rule import Context, Rule
from pseudoformer.passes.rules.layer_norm import _centred, _mean, _strip, norm_problem, root_of
from pseudoformer.passes.rules.matching import const_value, describe, escaping, same


@dataclass
class Match:
    root: Node
    src: tuple[Node, ...]
    x: Node
    axis: int
    gamma: Node
    eps: Node | None
    divisors: list[float]
    interior: list[Node]


def _mean_square(n: Node) -> tuple[Node, int, bool, list[float], list[Node]] | None:
    """mean(e²) over one axis: (e, axis, keepdims, divisors, interior)."""
    m = _mean(n)
    if m is None:
        return None
    sq = m.x
    if sq.op is Op.MUL and same(sq.src[0], sq.src[1]):
        e = sq.src[0]
    elif sq.op is Op.POW and const_value(sq.src[1]) == 2.0 and sq.type == sq.src[0].type:
        e = sq.src[0]
    else:
        return None
    return e, m.axis, m.keepdims, m.divisors, [*m.interior, sq]


def _root(n: Node) -> tuple[Node, int, Node | None, list[float], list[Node]] | None:
    """√(r [+ ε]) restored to e's rank: (e, axis, ε, divisors, interior)."""
    root = root_of(n, _mean_square, lambda f: (f[1], f[2]))
    if root is None:
        return None
    (e, axis, _, divisors, inner), eps, on_the_way = root
    return e, axis, eps, divisors, on_the_way + inner


def match(n: Node, src: tuple[Node, ...], ctx: Context) -> Match | None:
    if n.op is not Op.MUL or not n.dtype.is_float:
        return None
    for i in (0, 1):
        div, gamma = src[i], src[1 - i]
        if div.op is not Op.DIV:
            continue
        found = _root(div.src[1])
        if found is not None and same(found[0], div.src[0]) and div.type == div.src[0].type:
            if _centred(div.src[0]) is not None:
                return None  # (e − m)/√(mean((e − m)²) + ε): a layer norm, whose rule sees it at + β

            e, axis, eps, divisors, interior = found
            return Match(n, src, div.src[0], axis, gamma, eps, divisors, [div, *interior])
    return None


def check(m: Match, ctx: Context) -> str | None:
    why = norm_problem(m.x, m.axis, m.divisors, "the mean square", m.eps, {"γ": m.gamma}, m.root)
    if why is not None:
        return why
    shared = escaping(ctx, m.src, m.interior)
    if shared is not None:
        return f"an intermediate of the RMS norm ({describe(shared)}) is also used outside it"
    return None


def rewrite(m: Match, root: Node) -> Node:
    eps = 0.0 if m.eps is None else const_value(m.eps)
    return Node.at(root, Op.RMS_NORM, (m.x, _strip(m.gamma)), {"axis": m.axis, "eps": eps})


RULE = Rule("rms_norm", match, rewrite, check)
