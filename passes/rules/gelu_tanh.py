"""GELU written out → one GELU node: the tanh approximation, and the exact erf form.

    0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))   ⟶  gelu(x; approximate="tanh")
    0.5 · x · (1 + erf(x / √2))                          ⟶  gelu(x; approximate="none")

As variants.alg's GELU_tanh lowers it: mul(mul(0.5, x), add(1, tanh(mul(√(2/π), add(x,
mul(0.044715, mul(mul(x, x), x))))))), with √(2/π) folded to one constant. Products are matched as
products, whatever their grouping and operand order (x · 0.5 · (…), 0.5 · (x · (…)), …); x³ may be
x·x·x in any grouping or pow(x, 3); x/√2 may be x · (1/√2); the sums take either operand order.

The shape is matched with any scalar constants; the check then wants 0.5, 1, √(2/π) (or 1/√2) and
0.044715 to within 1e-6 and refuses otherwise, so a near-miss is reported rather than passed over.
It also refuses when an intermediate (x³, the tanh, 0.5·x, …) is read outside the formula.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pseudoformer.ir import Node, Op
from pseudoformer.passes.rule import Context, Rule
from pseudoformer.passes.rules.matching import (
    close,
    const_value,
    describe,
    escaping,
    factors,
    same,
    split_consts,
)

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
CUBIC = 0.044715


@dataclass
class Match:
    root: Node
    src: tuple[Node, ...]  # the root's operands as rebuilt
    x: Node
    approximate: str  # "tanh" or "none"
    constants: list[tuple[str, float, float]]  # (what, value written, value wanted)
    parts: dict[int, tuple[Node, str]] = field(default_factory=dict)  # interior node → its role


Parts = dict[int, tuple[Node, str]]


def _add(parts: Parts, role: str, nodes: list[Node]) -> None:
    for n in nodes:
        parts.setdefault(id(n), (n, role))


def _one_plus(n: Node) -> tuple[float, Node] | None:
    """1 + tanh(·) or 1 + erf(·), either order: (the constant, the tanh/erf node)."""
    if n.op is not Op.ADD:
        return None
    for i in (0, 1):
        c, f = const_value(n.src[i]), n.src[1 - i]
        if c is not None and f.op in (Op.TANH, Op.ERF) and f.type == n.type:
            return c, f
    return None


def _tanh_argument(n: Node, parts: Parts) -> tuple[Node, list[tuple[str, float, float]]] | None:
    """√(2/π) · (x + 0.044715 · x³): (x, its constants)."""
    scaling: list[Node] = []
    consts, rest = split_consts(factors(n, interior=scaling))
    if len(consts) != 1 or len(rest) != 1 or rest[0].op is not Op.ADD:
        return None
    inner = rest[0]
    for i in (0, 1):
        x, cubic = inner.src[i], inner.src[1 - i]
        powers: list[Node] = []
        k, xs = split_consts(factors(cubic, stop=x, interior=powers))
        if len(k) == 1 and len(xs) == 3 and all(same(f, x) for f in xs) and x.type == n.type:
            _add(parts, "the argument √(2/π)·(x + 0.044715·x³)", [n, *scaling])
            _add(parts, "the sum x + 0.044715·x³", [inner])
            _add(parts, "the power x² or x³ (or 0.044715·x³)", powers)
            return x, [("√(2/π)", consts[0], SQRT_2_OVER_PI), ("the cubic coefficient", k[0], CUBIC)]
    return None


def _erf_argument(n: Node, parts: Parts) -> tuple[Node, list[tuple[str, float, float]]] | None:
    """x / √2, or x · (1/√2) in either order: (x, its constant as a divisor)."""
    if n.op is Op.DIV and (c := const_value(n.src[1])) is not None and const_value(n.src[0]) is None:
        _add(parts, "the argument x/√2", [n])
        return n.src[0], [("the divisor √2", c, math.sqrt(2.0))]
    scaling: list[Node] = []
    consts, rest = split_consts(factors(n, interior=scaling))
    if len(consts) == 1 and len(rest) == 1 and consts[0] != 0.0:
        _add(parts, "the argument x/√2", scaling)
        return rest[0], [("the divisor √2", 1.0 / consts[0], math.sqrt(2.0))]
    return None


def match(n: Node, src: tuple[Node, ...], ctx: Context) -> Match | None:
    if n.op is not Op.MUL or not n.dtype.is_float:
        return None
    # Flatten the rebuilt operands, not n.src: an earlier rewrite may have replaced them.
    for f in [g for s in src for g in factors(s)]:
        found = _one_plus(f)
        if found is None:
            continue
        one, act = found
        parts: Parts = {}
        if act.op is Op.TANH:
            got, approximate = _tanh_argument(act.src[0], parts), "tanh"
        else:
            got, approximate = _erf_argument(act.src[0], parts), "none"
        if got is None:
            continue
        x, constants = got
        # The root's product must be exactly 0.5 · x · (1 + …), with x kept whole even if it is a product.
        outer: list[Node] = []
        halves, rest = split_consts([g for s in src for g in factors(s, stop=x, interior=outer)])
        others = [r for r in rest if r is not f]
        if len(halves) != 1 or len(others) != 1 or not same(others[0], x) or len(rest) != 2:
            continue
        _add(parts, f"the activation {act.op.value}(…)", [act])
        _add(parts, f"the sum 1 + {act.op.value}(…)", [f])
        _add(parts, "the product 0.5·x", outer)
        constants = [("the factor 0.5", halves[0], 0.5), ("the 1 in (1 + …)", one, 1.0), *constants]
        return Match(n, src, x, approximate, constants, parts)
    return None


def check(m: Match, ctx: Context) -> str | None:
    for what, value, want in m.constants:
        if not close(value, want):
            return f"{what} is {value!r}, not {want!r}: this is not GELU"
    if m.root.type != m.x.type:
        return f"the result {m.root.type} does not have the type of x {m.x.type}"
    shared = escaping(ctx, m.src, [n for n, _ in m.parts.values()])
    if shared is not None:
        return f"{m.parts[id(shared)][1]} ({describe(shared)}) is also used outside the GELU"
    return None


def rewrite(m: Match, root: Node) -> Node:
    return Node.at(root, Op.GELU, (m.x,), {"approximate": m.approximate})


RULE = Rule("gelu", match, rewrite, check)
