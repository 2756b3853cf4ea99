"""The builtin functions: exp, log, √, tanh, erf, sin, cos, |·|, ReLU, GELU, softmax, length, floor and ceil."""

from __future__ import annotations

from typing import Any

from pseudoformer.errors import AlgError
from pseudoformer.frontend.ast import Expr
from pseudoformer.frontend.errors import BadTypeError, UnknownNameError
from pseudoformer.frontend.expressions.core import describe, ev, ev_val, shown
from pseudoformer.frontend.frame import Frame
from pseudoformer.frontend.tensor_ops import cast_real, softmax_columns, unary
from pseudoformer.frontend.values import SizeVal, Val
from pseudoformer.ir import Op

UNARY_BUILTINS = {"exp": Op.EXP, "log": Op.LOG, "sqrt": Op.SQRT, "tanh": Op.TANH, "erf": Op.ERF, "sin": Op.SIN,
                  "cos": Op.COS, "abs": Op.ABS, "ReLU": Op.RELU, "relu": Op.RELU, "GELU": Op.GELU, "gelu": Op.GELU}
BUILTINS = set(UNARY_BUILTINS) | {"softmax", "length", "floor", "ceil"}


def call_builtin(f: Frame, e: Expr) -> Any:
    """`name(x)` for a builtin `name`; an unknown name is an error that lists the builtins."""
    name = e.text
    args, binds = e.args
    if name not in BUILTINS:
        raise f.error(UnknownNameError, f"unknown algorithm {name}", e.pos,
                      (f"builtins: {', '.join(sorted(BUILTINS))}",))
    if binds or len(args) != 1:
        raise f.error(AlgError, f"{name} takes one argument", e.pos)
    if name == "length":
        v = ev(f, args[0])
        if not isinstance(v, Val) or len(v.dims) != 1:
            raise f.error(BadTypeError, f"length() needs a sequence; {describe(args[0])} is {shown(v)}", args[0].pos)
        return SizeVal(v.dims[0])
    if name in ("sqrt", "floor", "ceil"):  # ASCII spellings of √, ⌊…⌋ and ⌈…⌉, which fold constants and sizes
        return ev(f, Expr(name, (args[0],), e.pos))
    x = ev_val(f, args[0])
    if name == "softmax":
        return softmax_columns(f.b, cast_real(f.b, x))
    op = UNARY_BUILTINS[name]
    attrs = {"approximate": "none"} if op is Op.GELU else {}
    return unary(f.b, op, x, **attrs)
