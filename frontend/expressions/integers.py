"""Integer arithmetic: `a mod b`, ⌊a/b⌋ and ⌈a/b⌉, and `static_int`, the compile-time integer evaluator.

`static_int` evaluates an expression of numbers, sizes and unrolled-loop variables to a Size (a
polynomial over size names, or an int) without building a graph: the bound of a sum (`Σ_{t=1}^{ℓ−1}`),
of a loop or of a map, and a script that picks a family member (`W_k^{⌈h/G⌉}`) ask it. An expression
of map variables (t, t′) has no compile-time value: it is computed in the graph instead, vectorised
over the variables' axes, by the handlers below (MOD, FLOOR, CEIL on reals, which hold integers
exactly up to 2²⁴).
"""

from __future__ import annotations

import math
from typing import Any

from pseudoformer.frontend.ast import Expr
from pseudoformer.frontend.errors import BadTypeError
from pseudoformer.frontend.expressions.core import (
    as_size,
    const,
    describe,
    ev,
    ev_val,
    handles,
    shown,
    size_node,
)
from pseudoformer.frontend.frame import Frame
from pseudoformer.frontend.sizes import Size, formula, rounded
from pseudoformer.frontend.tensor_ops import cast_real, elementwise, unary
from pseudoformer.frontend.values import SizeVal, Val
from pseudoformer.ir import DType, Op


def static_int(f: Frame, e: Expr) -> Size | None:
    """The value of an integer expression known before run time, as a Size; None when it has none
    (it reads a map variable or data, or a division or remainder that is not exact on symbolic sizes).
    A remainder by zero is a diagnostic."""
    op = e.op
    if op == "number":
        return Size.of(e.args[0]) if isinstance(e.args[0], int) else None
    if op == "name" and e.text in f.maps:
        return None
    if op in ("add", "sub", "juxt", "matmul"):
        x, y = (static_int(f, a) for a in e.args)
        if x is None or y is None:
            return None
        return x + y if op == "add" else x - y if op == "sub" else x * y
    if op == "neg":
        x = static_int(f, e.args[0])
        return None if x is None else x * -1
    if op == "power":  # x^{k}: a hostile k of many digits would multiply polynomials for ever
        x = static_int(f, e.args[0]) if e.args[1] <= 64 else None
        return None if x is None else math.prod([x] * e.args[1], start=Size.of(1))
    if op == "div":
        num, den = _ratio(f, e)
        return None if num is None or den is None else _exact(f, num, den)
    if op == "call" and e.text in ("floor", "ceil") and len(e.args[0]) == 1 and not e.args[1]:
        e = Expr(e.text, (e.args[0][0],), e.pos)  # the ASCII spelling ceil(h/G) of ⌈h/G⌉
        op = e.op
    if op in ("floor", "ceil"):
        return _rounded(f, e)
    if op == "mod":
        return _remainder(f, e)
    if op == "name" or (op == "call" and e.text == "length"):
        return as_size(ev(f, e))
    return None


def is_integer(f: Frame, e: Expr) -> bool:
    """Whether an expression has whole values everywhere: integers, sizes, loop and map variables, and
    + − · mod ⌊⌋ ⌈⌉ of them. (−1)^{t} is then an integer power at every position."""
    if e.op == "name":
        return e.text in f.maps or e.text in f.loops or static_int(f, e) is not None
    if e.op == "number":
        return isinstance(e.args[0], int)
    if e.op in ("add", "sub", "juxt", "matmul", "neg", "mod"):
        return all(is_integer(f, a) for a in e.args)
    return e.op in ("floor", "ceil") or static_int(f, e) is not None


def _ratio(f: Frame, e: Expr) -> tuple[Size | None, Size | None]:
    if e.op == "div":
        return static_int(f, e.args[0]), static_int(f, e.args[1])
    return static_int(f, e), Size.of(1)


def _exact(f: Frame, num: Size, den: Size) -> Size | None:
    num, den = f.b.resolve(num), f.b.resolve(den)
    if num.is_int and den.is_int:
        if den.value == 0 or num.value % den.value:
            return None
        return Size.of(num.value // den.value)
    return num.div(den)


def _rounded(f: Frame, e: Expr) -> Size | None:
    num, den = _ratio(f, e.args[0])
    if num is None or den is None:
        return None
    num, den = f.b.resolve(num), f.b.resolve(den)
    if den == Size.of(0):
        raise f.error(BadTypeError, f"{'⌊' if e.op == 'floor' else '⌈'}a/b{'⌋' if e.op == 'floor' else '⌉'} "
                      "divides by 0", e.pos)
    r = rounded(e.op, num, den)
    return r if r is not None else _opaque(f, e.op, num, den)


def _remainder(f: Frame, e: Expr) -> Size | None:
    x, y = (static_int(f, a) for a in e.args)
    if y is not None and f.b.resolve(y) == Size.of(0):
        raise f.error(BadTypeError, "a remainder mod 0 is undefined", e.args[1].pos)
    if x is None or y is None:
        return None
    x, y = f.b.resolve(x), f.b.resolve(y)
    r = rounded("mod", x, y)
    return r if r is not None else _opaque(f, "mod", x, y)


def _opaque(f: Frame, op: str, num: Size, den: Size) -> Size | None:
    """⌊ℓ/2⌋ of a size known only at run time (or, checking without a config, of a symbolic one): a size
    of its own, named by its formula, which the graph computes from the sizes it is made of. Sizes are
    never negative, so the graph's integer division, which truncates, floors them."""
    size = formula(op, num, den)
    name = str(size)
    if f.root().symbolic or name in f.b.run_dims:
        return size
    if not (num.names() | den.names()) <= f.b.run_dims.keys():
        return None
    a, b = size_node(f, num, None), size_node(f, den, None)
    if op == "ceil":
        a = f.b.node(Op.SUB, f.b.node(Op.ADD, a, b), f.b.const(1, DType.int64))
    q = f.b.node(Op.DIV, a, b)
    f.b.run_dims[name] = f.b.node(Op.SUB, a, f.b.node(Op.MUL, b, q)) if op == "mod" else q
    return size


def _static_value(f: Frame, e: Expr) -> Val | SizeVal | None:
    s = static_int(f, e)
    if s is None:
        return None
    s = f.b.resolve(s)
    return const(f, s.value) if s.is_int else SizeVal(s)


def _number(f: Frame, v: Val, e: Expr) -> Val:
    if v.kind == "token":  # ids name tokens; their arithmetic means nothing
        raise f.error(BadTypeError, f"{describe(e)} is {shown(v)}, a token id, not a number", e.pos)
    return cast_real(f.b, v)


@handles("mod")
def _mod(f: Frame, e: Expr) -> Any:
    if (s := _static_value(f, e)) is not None:
        return s
    x, y = (_number(f, ev_val(f, a), a) for a in e.args)
    if y.const == 0:
        raise f.error(BadTypeError, "a remainder mod 0 is undefined", e.args[1].pos)
    if isinstance(x.const, (int, float)) and isinstance(y.const, (int, float)):
        return const(f, x.const - y.const * math.floor(x.const / y.const))
    return elementwise(f.b, Op.MOD, [x, y], "take the remainder of")


@handles("floor", "ceil")
def _round(f: Frame, e: Expr) -> Any:
    if (s := _static_value(f, e)) is not None:
        return s
    x = _number(f, ev_val(f, e.args[0]), e.args[0])
    if isinstance(x.const, (int, float)) and math.isfinite(x.const):
        return const(f, math.floor(x.const) if e.op == "floor" else math.ceil(x.const))
    return unary(f.b, Op.FLOOR if e.op == "floor" else Op.CEIL, x)
