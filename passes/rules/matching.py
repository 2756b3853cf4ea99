"""Small matchers the fusion rules share: scalar constants, products, structural sameness, escaping uses.

The frontend lowers the paper's formulas literally, so one formula reaches a rule in several
spellings: a constant on either side of a product, `x³` as `(x·x)·x`, and — before CSE — the same
subexpression built twice. These helpers let a rule state its formula once and accept them all.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from pseudoformer.ir import Node, Op
from pseudoformer.passes.rule import Context


def const_value(n: Node) -> float | None:
    """The value of a scalar CONST, else None."""
    if n.op is Op.CONST and n.shape == ():
        return float(n.attrs["value"])
    return None


def close(value: float, want: float, rel: float = 1e-6) -> bool:
    # Relative with a floor of 1 so that small targets (0.044715) are judged on absolute error too.
    return math.isfinite(value) and abs(value - want) <= rel * max(1.0, abs(want))


def norm_axes(axes: Iterable[int], rank: int) -> list[int]:
    return sorted(a % rank for a in axes) if rank else []


def same(a: Node, b: Node, depth: int = 6) -> bool:
    """Whether `a` and `b` compute the same value: identical, or equal op, attributes and operands.

    Before CSE the frontend builds `(e − m)` once per use; comparing structure a few levels deep
    lets a rule see through that without running CSE itself. Leaves compare by name or value.
    """
    if a is b:
        return True
    if depth == 0 or a.op is not b.op or len(a.src) != len(b.src) or a.type != b.type:
        return False
    if a.op is Op.INPUT:
        return False  # two distinct inputs are two values even if they share a name by mistake
    if a.attrs != b.attrs:
        return False
    return all(same(x, y, depth - 1) for x, y in zip(a.src, b.src, strict=True))


def factors(n: Node, stop: Node | None = None, interior: list[Node] | None = None) -> list[Node]:
    """The factors of a product tree of MUL nodes (and POW by a constant positive integer).

    Flattening stops at `stop` (or anything `same` as it), so a factor that is itself a product
    stays whole. The MUL/POW nodes flattened through are appended to `interior`.
    """
    if stop is not None and same(n, stop):
        return [n]
    if n.op is Op.MUL:
        if interior is not None:
            interior.append(n)
        return [f for s in n.src for f in factors(s, stop, interior)]
    if n.op is Op.POW:
        k = const_value(n.src[1])
        if k is not None and k == int(k) and 1 <= k <= 4 and n.type == n.src[0].type:
            if interior is not None:
                interior.append(n)
            return factors(n.src[0], stop, interior) * int(k)
    return [n]


def split_consts(fs: list[Node]) -> tuple[list[float], list[Node]]:
    """Separate scalar constants from the other factors."""
    values = [v for f in fs if (v := const_value(f)) is not None]
    return values, [f for f in fs if const_value(f) is None]


def escaping(ctx: Context, root_src: tuple[Node, ...], interior: Iterable[Node]) -> Node | None:
    """The first interior node of a match that something outside the match also reads, else None.

    A node read only from inside the match dies with the rewrite; one read from outside would
    have to be computed anyway, so fusing would duplicate its work (and that of its operands).
    `(e − m)` is read three times inside layer_norm after CSE (twice by the square, once by the
    division), so counting uses against the match, not `used_once`, is what tells them apart.
    `root_src` are the root's operands as rebuilt: the root itself is the input graph's node.
    """
    nodes = {id(n): n for n in interior}
    inside: dict[int, int] = {}
    for srcs in [root_src, *(n.src for n in nodes.values())]:
        for s in srcs:
            inside[id(s)] = inside.get(id(s), 0) + 1
    for key, n in nodes.items():
        if inside.get(key, 0) == 1:
            if not ctx.used_once(n):
                return n
        elif total_uses(ctx, n) > inside.get(key, 0):
            return n
    return None


def total_uses(ctx: Context, n: Node) -> int:
    """How many operand slots (and outputs) of the graph being rewritten read `n`."""
    old = ctx.origins.get(id(n), n)
    return ctx.consumers.count(old)


def describe(n: Node) -> str:
    """A node as a refusal reason names it: op, type and where the source wrote it."""
    where = f" at {n.span}" if n.span is not None else (f" in {n.scope}" if n.scope else "")
    return f"{n.op.value} : {n.type}{where}"
