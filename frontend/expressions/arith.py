"""Arithmetic, powers, transposes, Iverson brackets, comparisons and truth values."""

from __future__ import annotations

import math
from typing import Any

from pseudoformer.frontend.ast import Expr
from pseudoformer.frontend.errors import BadTypeError, ShapeError
from pseudoformer.frontend.expressions.core import const, describe, ev_val, handles, size_node
from pseudoformer.frontend.expressions.integers import is_integer, static_int
from pseudoformer.frontend.frame import Frame
from pseudoformer.frontend.sizes import BROADCAST, ONE
from pseudoformer.frontend.tensor_ops import cast_real, elementwise, product, show, transpose, unary
from pseudoformer.frontend.values import Val
from pseudoformer.ir import DType, Op
from pseudoformer.ir.ops.elementwise import COMPARE_FNS

REL_OPS = {"<": Op.LT, "<=": Op.LE, ">": Op.GT, ">=": Op.GE, "==": Op.EQ, "!=": Op.NE}


# The largest float32: a model computes in float32 (or narrower), so a literal past it would become ±∞ there.
FLOAT32_MAX = 3.4028234663852886e38


@handles("number")
def _number(f: Frame, e: Expr) -> Val:
    if not abs(float(e.args[0])) <= FLOAT32_MAX:  # an integer of 39+ digits too
        raise f.error(BadTypeError, f"the number {e.text} is beyond float32's range (±3.4·10³⁸), which the model "
                      "computes in; write ∞ for an infinity", e.pos)
    return const(f, e.args[0])


@handles("inf")
def _inf(f: Frame, e: Expr) -> Val:
    return const(f, math.inf)


@handles("add", "sub", "div", "hadamard")
def _elementwise(f: Frame, e: Expr) -> Val:
    op = e.op
    x, y = ev_val(f, e.args[0]), ev_val(f, e.args[1])
    if x.const is not None and y.const is not None and isinstance(x.const, (int, float)) \
            and isinstance(y.const, (int, float)) and op != "hadamard":
        return _fold(f, op, x.const, y.const)
    opc = {"add": Op.ADD, "sub": Op.SUB, "div": Op.DIV, "hadamard": Op.MUL}[op]
    what = {"add": "add", "sub": "subtract", "div": "divide", "hadamard": "multiply element-wise"}[op]
    return elementwise(f.b, opc, [cast_real(f.b, x), cast_real(f.b, y)], what)


@handles("juxt", "matmul")
def _product(f: Frame, e: Expr) -> Val:
    x, y = ev_val(f, e.args[0]), ev_val(f, e.args[1])
    if x.const is not None and y.const is not None and not x.dims and not y.dims:
        return _fold(f, "mul", x.const, y.const)
    for v, a in ((x, e.args[0]), (y, e.args[1])):
        if v.kind == "token" and v.dims:
            raise f.error(ShapeError, f"product {show(x)} · {show(y)}: {describe(a)} is a sequence of token ids, "
                          "not a vector of numbers; embed it first, as W_e[:, x[t]]", e.pos)
    return product(f.b, cast_real(f.b, x), cast_real(f.b, y))


@handles("neg")
def _neg(f: Frame, e: Expr) -> Val:
    x = ev_val(f, e.args[0])
    if isinstance(x.const, (int, float)) and not isinstance(x.const, bool):
        return const(f, -x.const)
    return unary(f.b, Op.NEG, x)


@handles("sqrt")
def _sqrt(f: Frame, e: Expr) -> Val:
    x = ev_val(f, e.args[0])
    if isinstance(x.const, (int, float)) and not isinstance(x.const, bool):
        return const(f, math.sqrt(x.const))
    return unary(f.b, Op.SQRT, x)


@handles("power")
def _power_form(f: Frame, e: Expr) -> Val:
    return power(f, ev_val(f, e.args[0]), e.args[1])


@handles("real_power")
def _real_power(f: Frame, e: Expr) -> Val:
    return real_power(f, e.args[0], e.args[1], e.pos)


def real_power(f: Frame, base_e: Expr, exponent_e: Expr, pos: Any, base: Val | None = None) -> Val:
    """b^{e}: a whole exponent known before run time is an integer power (products, as x² is); any other
    is element-wise exp(e log b), defined for a positive base, so a base that is not is a diagnostic."""
    x = base if base is not None else ev_val(f, base_e)
    k = static_int(f, exponent_e)
    if k is not None and f.b.resolve(k).is_int and f.b.resolve(k).value >= 1:
        return power(f, x, f.b.resolve(k).value)
    y = ev_val(f, exponent_e)
    for v, what in ((x, "base"), (y, "exponent")):
        if v.kind == "token":
            raise f.error(BadTypeError, f"the {what} of a power is {show(v)}, token ids, not numbers", pos)
    whole = is_integer(f, exponent_e) or (isinstance(y.const, (int, float)) and float(y.const).is_integer())
    if isinstance(x.const, (int, float)) and not isinstance(x.const, bool) and x.const <= 0 and not whole:
        which = f"{base_e.text} is" if base_e.op == "name" else "it is"
        raise f.error(BadTypeError, f"the base of a real power b^{{e}} must be positive, and {which} {x.const:g}; "
                      "a base ≤ 0 has a power only for whole exponents", base_e.pos)
    if x.const == math.e and not isinstance(x.const, bool):  # e^{x}: the exponential
        return unary(f.b, Op.EXP, y)
    if isinstance(x.const, (int, float)) and isinstance(y.const, (int, float)) and \
            not isinstance(x.const, bool) and not isinstance(y.const, bool):
        try:
            return const(f, float(x.const) ** float(y.const))
        except (OverflowError, ZeroDivisionError):
            return const(f, math.inf)
    return elementwise(f.b, Op.POW, [cast_real(f.b, x), cast_real(f.b, y)], "raise to the power")


@handles("transpose")
def _transpose(f: Frame, e: Expr) -> Val:
    if e.args[0].op == "number" and e.args[0].args[0] == 1:
        # 1ᵀ: a row of ones whose length is whatever it meets
        return Val(f.b.node(Op.UNSQUEEZE, f.b.const(1.0), axes=[0, 1]), "real", (ONE, BROADCAST), const="ones_row")
    return transpose(f.b, ev_val(f, e.args[0]))


@handles("iverson")
def _iverson(f: Frame, e: Expr) -> Val:
    v = ev_val(f, e.args[0])
    if isinstance(v.const, bool):
        return const(f, 1.0 if v.const else 0.0)
    return v  # a {0,1} value; arithmetic casts it to ℝ where it meets reals


@handles("not")
def _not(f: Frame, e: Expr) -> Val:
    v = ev_val(f, e.args[0])
    if isinstance(v.const, bool):
        return _bool(f, not v.const)
    return unary(f.b, Op.NOT, _to_bool(f, v, e))


@handles("and", "or")
def _logic(f: Frame, e: Expr) -> Val:
    x, y = (_to_bool(f, ev_val(f, a), a) for a in e.args)
    # a side known before run time decides or drops out: [[t_z ≤ t_x ∧ (l mod 2 = 0 ∨ t_x − t_z < w)]] in
    # layer l is layer l's own causal or windowed mask, which the attention fusion reads as such
    for known, other in ((x, y), (y, x)):
        if isinstance(known.const, bool):
            decides = known.const is (e.op == "or")
            return known if decides else other
    return elementwise(f.b, Op.AND if e.op == "and" else Op.OR, [x, y], e.op, kind="bool")


def _fold(f: Frame, op: str, x: float, y: float) -> Val:
    if op == "add":
        return const(f, x + y)
    if op == "sub":
        return const(f, x - y)
    if op == "mul":
        return const(f, x * y)
    return const(f, x / y if y else math.copysign(math.inf, x))


def _is_number(c: object) -> bool:
    return isinstance(c, (int, float)) and not isinstance(c, bool)


def _bool(f: Frame, value: bool) -> Val:
    return Val(f.b.const(value, DType.bool), "bool", const=value)


def _to_bool(f: Frame, v: Val, e: Expr) -> Val:
    if v.kind == "bool":
        return v
    raise f.error(BadTypeError, f"{describe(e)} is {show(v)}, not a truth value", e.pos)


def power(f: Frame, x: Val, k: int) -> Val:
    if isinstance(x.const, (int, float)) and not isinstance(x.const, bool):
        try:
            return const(f, float(x.const) ** k)
        except OverflowError:
            return const(f, math.copysign(math.inf, x.const) if k % 2 else math.inf)
    if k > _PRODUCTS:  # x^{99999}: one power, not a chain of 99998 products
        return elementwise(f.b, Op.POW, [cast_real(f.b, x), const(f, k)], "raise to the power")
    out = x
    for _ in range(k - 1):  # small integer powers as products: exact, and what fusions look for
        out = elementwise(f.b, Op.MUL, [out, x], "multiply")
    return out


_PRODUCTS = 8  # the largest integer power written out as products


@handles("compare")
def _compare(f: Frame, e: Expr) -> Val:
    operands, rels = e.args
    # [[t ≤ t']] over two index variables is a mask op, the form fusion passes look for
    if len(rels) == 1 and all(o.op == "name" and o.text in f.maps for o in operands) \
            and operands[0].text != operands[1].text:  # [[t ≤ t]] is no mask over two indices
        a, b = (f.maps[o.text] for o in operands)
        if a.size is not None and b.size is not None:
            node = f.b.node(Op.INDEX_MASK, size_node(f, a.size, e.pos), size_node(f, b.size, e.pos), rel=rels[0],
                            dims=[f.b.resolve(a.size).dim(), f.b.resolve(b.size).dim()])
            return Val(node, "bool", (), ((a.internal, a.size), (b.internal, b.size)))
    vals = [ev_val(f, o) for o in operands]
    out: Val | None = None
    for (x, y), rel in zip(zip(vals, vals[1:], strict=False), rels, strict=True):
        if x.kind != y.kind:
            x, y = cast_real(f.b, x), cast_real(f.b, y)
        if _is_number(x.const) and _is_number(y.const):  # l mod 2 = 0 of a block-loop variable: known now
            c = _bool(f, bool(COMPARE_FNS[REL_OPS[rel]](x.const, y.const)))
        else:
            c = elementwise(f.b, REL_OPS[rel], [x, y], "compare", kind="bool")
        if out is not None and (isinstance(c.const, bool) or isinstance(out.const, bool)):
            out = next((v for v in (out, c) if v.const is False), c if out.const is True else out)
            continue
        out = c if out is None else elementwise(f.b, Op.AND, [out, c], "and", kind="bool")
    assert out is not None
    return out
