"""Layer normalisation (the paper's Algorithm 6, and 6ε with ε inside the root) → one LAYER_NORM.

    m = Σ_i e[i] / d                       reduce_sum(div(e, d), [a])  or  reduce_mean(e, [a])
    v = Σ_i (e[i] − m)² / d                the same mean of mul(e − m, e − m) or pow(e − m, 2)
    ê = (e − m) / √(v [+ ε]) ⊙ γ + β        add(mul(div(e − m, √(v + ε)), γ), β)
      ⟶  layer_norm(e, γ, β; axis=a, eps=ε or 0.0)

The means may also be written reduce_sum(e)/d or with a multiplication by 1/d; a mean reduced
without keepdims reaches e's rank again through unsqueeze(·, [a]), anywhere between the reduction
and the subtraction or division; γ and β are vectors over axis a, unsqueezed so that they
broadcast along it (the frontend writes γ 1ᵀ as unsqueeze(γ, [1]) in the [batch, d, seq] layout).
Either operand order of ⊙, + and + ε matches. Before CSE the two `(e − m)` the paper writes are
distinct nodes; they match when they compute the same value.

Refused, with the reason: a divisor that is not the size of axis a (or a symbolic axis), an ε that
is not a scalar constant, a γ or β that is not a vector over axis a, and any intermediate (the
mean, e − m, the variance, …) that something outside the formula also reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from pseudoformer.ir import Node, Op
from pseudoformer.passes.rule import Context, Rule
from pseudoformer.passes.rules.matching import close, const_value, describe, escaping, norm_axes, same

T = TypeVar("T")


@dataclass
class Mean:
    """A mean of `x` over one axis, and the divisors it was written with."""

    x: Node
    axis: int  # in x's coordinates, non-negative
    keepdims: bool
    divisors: list[float] = field(default_factory=list)  # each d of a `/ d`; a `· c` records 1/c
    interior: list[Node] = field(default_factory=list)


@dataclass
class Match:
    root: Node
    src: tuple[Node, ...]  # the root's operands as rebuilt
    x: Node
    axis: int
    gamma: Node  # as multiplied in, possibly unsqueezed
    beta: Node
    eps: Node | None
    divisors: list[float]
    interior: list[Node]


def _single_axis(n: Node) -> int | None:
    axes = norm_axes(n.attrs["axes"], n.src[0].type.rank)
    return axes[0] if len(axes) == 1 else None


def _scaled_by_const(n: Node) -> tuple[Node, float] | None:
    """n = y / c or y · c (either side): (y, the divisor that means)."""
    if n.op is Op.DIV and (c := const_value(n.src[1])) is not None:
        return n.src[0], c
    if n.op is Op.MUL:
        for i in (0, 1):
            c = const_value(n.src[i])
            if c is not None and c != 0.0 and const_value(n.src[1 - i]) is None:
                return n.src[1 - i], 1.0 / c
    return None


def _mean(n: Node) -> Mean | None:
    """reduce_mean(x), reduce_sum(x / d), reduce_sum(x) / d, or the same with · 1/d."""
    if n.op is Op.REDUCE_MEAN and (ax := _single_axis(n)) is not None:
        return Mean(n.src[0], ax, bool(n.attrs.get("keepdims", False)), [], [n])
    if n.op is Op.REDUCE_SUM and (ax := _single_axis(n)) is not None:
        inner = _scaled_by_const(n.src[0])
        if inner is not None and inner[0].type == n.src[0].type:
            return Mean(inner[0], ax, bool(n.attrs.get("keepdims", False)), [inner[1]], [n, n.src[0]])
        return None
    outer = _scaled_by_const(n)
    if outer is not None and outer[0].op is Op.REDUCE_SUM and outer[0].type == n.type:
        red = outer[0]
        if (ax := _single_axis(red)) is not None:
            return Mean(red.src[0], ax, bool(red.attrs.get("keepdims", False)), [outer[1]], [n, red])
    return None


def _restored_mean(n: Node) -> Mean | None:
    """A mean brought back to its operand's rank: kept with keepdims, or through `unsqueeze(·, [a])`."""
    unsq = None
    if n.op is Op.UNSQUEEZE:
        unsq, n = n, n.src[0]
    mean = _mean(n)
    if mean is None:
        return None
    if unsq is None:
        return mean if mean.keepdims else None
    if mean.keepdims or norm_axes(unsq.attrs["axes"], unsq.type.rank) != [mean.axis]:
        return None
    mean.interior.append(unsq)
    return mean


def _centred(n: Node) -> Mean | None:
    """e − m with m the mean of e: the Mean of e, with the subtraction added to its interior."""
    if n.op is not Op.SUB or n.type != n.src[0].type:
        return None
    mean = _restored_mean(n.src[1])
    if mean is None or not same(mean.x, n.src[0]):
        return None
    mean.interior.append(n)
    return mean


def _variance(n: Node) -> tuple[Mean, Mean] | None:
    """The mean of (e − m)²: (that mean, the centring it squares)."""
    var = _mean(n)
    if var is None:
        return None
    sq = var.x
    if sq.op is Op.MUL and same(sq.src[0], sq.src[1]):
        sides = list(sq.src)
    elif sq.op is Op.POW and const_value(sq.src[1]) == 2.0 and sq.type == sq.src[0].type:
        sides = [sq.src[0]]
    else:
        return None
    centred = [_centred(s) for s in sides]
    if any(c is None for c in centred) or centred[0].axis != var.axis:
        return None
    var.interior.append(sq)
    for c in centred:
        var.interior += c.interior
    return var, centred[0]


def root_of(n: Node, inner: Callable[[Node], T | None], axis_of: Callable[[T], tuple[int, bool]]
            ) -> tuple[T, Node | None, list[Node]] | None:
    """√(s [+ ε]) with s a mean that `inner` recognises, restored to its operand's rank by keepdims or
    an unsqueeze before or after the root: (inner's match, ε, the nodes on the way)."""
    on_the_way: list[Node] = []
    unsq: Node | None = None
    eps: Node | None = None
    if n.op is Op.UNSQUEEZE:
        unsq, n = n, n.src[0]
    if n.op is not Op.SQRT:
        return None
    on_the_way.append(n)
    n = n.src[0]
    if n.op is Op.ADD:
        for i in (0, 1):
            if inner(_strip(n.src[i])) is not None:
                on_the_way.append(n)
                n, eps = n.src[i], n.src[1 - i]
                break
        else:
            return None
    if n.op is Op.UNSQUEEZE and unsq is None:
        unsq, n = n, n.src[0]
    found = inner(n)
    if found is None:
        return None
    axis, keepdims = axis_of(found)
    axes = None if unsq is None else norm_axes(unsq.attrs["axes"], unsq.type.rank)
    if (axes is None) != keepdims or (axes is not None and axes != [axis]):
        return None
    if unsq is not None:
        on_the_way.append(unsq)
    return found, eps, on_the_way


def _denominator(n: Node) -> tuple[Mean, Mean, Node | None, list[Node]] | None:
    """√(v [+ ε]) with v the variance, restored to e's rank: (v, its centring, ε, the nodes on the way)."""
    root = root_of(n, _variance, lambda f: (f[0].axis, f[0].keepdims))
    if root is None:
        return None
    (var, centred), eps, on_the_way = root
    return var, centred, eps, on_the_way


def _strip(n: Node) -> Node:
    while n.op is Op.UNSQUEEZE:
        n = n.src[0]
    return n


def _normalised(div: Node) -> tuple[Node, int, Node | None, list[float], list[Node]] | None:
    """(e − m) / √(v + ε): (e, axis, ε, divisors, interior)."""
    if div.op is not Op.DIV:
        return None
    centred = _centred(div.src[0])
    den = _denominator(div.src[1])
    if centred is None or den is None:
        return None
    var, var_centred, eps, on_the_way = den
    if centred.axis != var.axis or not same(var_centred.x, centred.x):
        return None
    if div.type != centred.x.type:
        return None
    interior = [div, *centred.interior, *var.interior, *var_centred.interior, *on_the_way]
    return centred.x, centred.axis, eps, centred.divisors + var.divisors + var_centred.divisors, interior


def match(n: Node, src: tuple[Node, ...], ctx: Context) -> Match | None:
    if n.op is not Op.ADD or not n.dtype.is_float:
        return None
    for i in (0, 1):
        scaled, beta = src[i], src[1 - i]
        if scaled.op is not Op.MUL:
            continue
        for j in (0, 1):
            found = _normalised(scaled.src[j])
            if found is not None:
                x, axis, eps, divisors, interior = found
                return Match(n, src, x, axis, scaled.src[1 - j], beta, eps, divisors, [scaled, *interior])
    return None


def _vector_problem(what: str, v: Node, x: Node, axis: int) -> str | None:
    """Why `v` is not a [d] vector (unsqueezed or not) that broadcasts along `axis` of `x`."""
    d = x.shape[axis]
    target = tuple(d if i == axis else 1 for i in range(x.type.rank))
    fits = v.type.rank <= x.type.rank and v.shape == target[x.type.rank - v.type.rank:]
    if not fits or _strip(v).shape != (d,) or v.dtype != x.dtype:
        return f"{what} ({describe(v)}) is not a vector over axis {axis} of {x.type}"
    return None


def norm_problem(x: Node, axis: int, divisors: list[float], mean: str, eps: Node | None,
                 vectors: dict[str, Node], root: Node) -> str | None:
    """What the layer-norm and RMS-norm rules both refuse: a divisor other than the axis size, an ε
    that is not a constant, scale/offset vectors not over the axis, a result of another type."""
    d = x.shape[axis]
    if not isinstance(d, int):
        return f"axis {axis} of {x.type} has the symbolic size {d!r}: the divisor cannot be checked"
    for divisor in divisors:
        if not close(divisor, float(d)):
            return f"{mean} divides by {divisor:g}, not by the size {d} of the reduced axis {axis}"
    if eps is not None and const_value(eps) is None:
        return f"ε ({describe(eps)}) is not a scalar constant"
    for what, v in vectors.items():
        if (why := _vector_problem(what, v, x, axis)) is not None:
            return why
    if root.type != x.type:
        return f"the result {root.type} does not have the type of the input {x.type}"
    return None


def check(m: Match, ctx: Context) -> str | None:
    why = norm_problem(m.x, m.axis, m.divisors, "a mean", m.eps, {"γ": m.gamma, "β": m.beta}, m.root)
    if why is not None:
        return why
    shared = escaping(ctx, m.src, m.interior)
    if shared is not None and not _normalised_for_another_scale(ctx, shared, m):
        return f"{_role(shared)} ({describe(shared)}) is also used outside the layer norm"
    return None


def _normalised_for_another_scale(ctx: Context, shared: Node, m: Match) -> bool:
    """Whether what escapes is the normalised value (e − m)/√(v + ε) itself, read outside only by products with
    another vector: a second layer norm of the same x (GPT-NeoX's parallel residual, LN₁(x) and LN₂(x), which
    CSE shares up to their scales). Each fuses; the shared formula then has no reader left."""
    if shared.op is not Op.DIV or not any(n is shared for n in m.interior):
        return False
    if escaping(ctx, (*m.src, *shared.src), [n for n in m.interior if n is not shared]) is not None:
        return False  # something else escapes too
    old = ctx.origins.get(id(shared), shared)
    users = [u for u in ctx.consumers.of(old) if not any(u is n or ctx.origins.get(id(n)) is u for n in m.interior)]
    return not ctx.consumers.is_output(old) and all(
        u.op is Op.MUL and any(s is not old and s.shape == m.gamma.shape for s in u.src) for u in users)


def _role(n: Node) -> str:
    """What an intermediate is in the paper's formula, for a refusal reason a user can act on."""
    if n.op is Op.SUB:
        return "the centred value e − m"
    if n.op in (Op.REDUCE_SUM, Op.REDUCE_MEAN, Op.UNSQUEEZE):
        return "the mean m or the variance v"
    if n.op is Op.POW or (n.op is Op.MUL and n.src[0].op is Op.SUB):
        return "the square (e − m)²"
    if n.op in (Op.SQRT, Op.ADD):
        return "the deviation √(v + ε)"
    if n.op is Op.DIV and const_value(n.src[1]) is None:
        return "the normalised value (e − m)/√(v + ε)"
    if n.op is Op.MUL and any(s.op is Op.DIV and const_value(s.src[1]) is None for s in n.src):
        return "the scaled value (e − m)/√(v + ε) ⊙ γ"
    return "an intermediate"


def rewrite(m: Match, root: Node) -> Node:
    eps = 0.0 if m.eps is None else const_value(m.eps)
    return Node.at(root, Op.LAYER_NORM, (m.x, _strip(m.gamma), _strip(m.beta)), {"axis": m.axis, "eps": eps})


RULE = Rule("layer_norm", match, rewrite, check)
