"""The builtin functions: exp, log, √, tanh, erf, sin, cos, |·|, ReLU, GELU, SiLU, sigmoid, elu, softmax, length,
floor, ceil, and min and max of two values."""

from __future__ import annotations

from typing import Any

from pseudoformer.base.errors import AlgError
from pseudoformer.frontend.ast import Expr
from pseudoformer.frontend.errors import BadTypeError, ShapeError, UnknownNameError
from pseudoformer.frontend.expressions.core import describe, ev, ev_val, shown
from pseudoformer.frontend.frame import Frame
from pseudoformer.frontend.tensor_ops import ShapeMismatch, cast_real, elementwise, softmax_columns, unary
from pseudoformer.frontend.values import SizeVal, Val
from pseudoformer.ir import Op

UNARY_BUILTINS = {"exp": Op.EXP, "log": Op.LOG, "sqrt": Op.SQRT, "tanh": Op.TANH, "erf": Op.ERF, "sin": Op.SIN,
                  "cos": Op.COS, "abs": Op.ABS, "ReLU": Op.RELU, "relu": Op.RELU, "GELU": Op.GELU, "gelu": Op.GELU,
                  "SiLU": Op.SILU, "silu": Op.SILU}
FORMULAS = {"sigmoid", "elu", "ELU"}  # written as formulas of other ops (see _formula)
TOP_K_CALLS = {"topk", "argtopk", "keeptopk"}  # torch.topk(…) and Shazeer's KeepTopK(…): refused with the spelling
BUILTINS = set(UNARY_BUILTINS) | FORMULAS | {"softmax", "length", "floor", "ceil", "min", "max"}


def call_builtin(f: Frame, e: Expr) -> Any:
    """`name(x)` for a builtin `name`; an unknown name is an error that lists the builtins."""
    name = e.text
    args, binds = e.args
    if name.lower().replace("_", "") in TOP_K_CALLS:
        raise f.error(UnknownNameError, "top-k is written over an index: top-k_{j ∈ [E]} G[j, t] for the k largest "
                      "entries of column t, argtop-k_{j ∈ [E]} G[j, t] for their positions (from 1)", e.pos)
    if name not in BUILTINS:
        raise f.error(UnknownNameError, f"unknown algorithm {name}", e.pos,
                      (f"builtins: {', '.join(sorted(BUILTINS))}",))
    if name in ("min", "max") and not binds:
        return _min_max(f, e)
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
    if name in FORMULAS:
        return _formula(f, name, cast_real(f.b, x))
    op = UNARY_BUILTINS[name]
    attrs = {"approximate": "none"} if op is Op.GELU else {}
    return unary(f.b, op, x, **attrs)


def _formula(f: Frame, name: str, x: Val) -> Val:
    """sigmoid(x) = 1 / (1 + e^{−x}); elu(x) = x where x > 0, else e^{x} − 1 (Clevert et al., 2016, α = 1)."""
    def num(c: float) -> Val:
        return Val(f.b.const(c), "real", const=c)

    if name == "sigmoid":
        e = unary(f.b, Op.EXP, unary(f.b, Op.NEG, x))
        return elementwise(f.b, Op.DIV, [num(1.0), elementwise(f.b, Op.ADD, [num(1.0), e], "add")], "divide")
    below = elementwise(f.b, Op.SUB, [unary(f.b, Op.EXP, elementwise(f.b, Op.MIN, [x, num(0.0)], "min")), num(1.0)],
                        "subtract")  # exp of min(x, 0): never ∞ where x > 0 picks x
    return elementwise(f.b, Op.WHERE, [elementwise(f.b, Op.GT, [x, num(0.0)], "compare"), x, below], "select",
                       kind="real")


def _min_max(f: Frame, e: Expr) -> Val:
    """min(a, b), max(a, b): element-wise, of values of one shape or a value and a number."""
    name = e.text
    args = e.args[0]
    if len(args) != 2:
        raise f.error(AlgError, f"{name}(a, b) takes two values; the {name} over an index is written "
                      f"{name}_{{j ∈ [n]}} x_j (ASCII {name}_{{j in [n]}}, LaTeX \\{name}_{{j \\in [n]}})", e.pos)
    a, b = (cast_real(f.b, ev_val(f, x)) for x in args)
    try:
        return elementwise(f.b, Op.MIN if name == "min" else Op.MAX, [a, b], name)
    except ShapeMismatch as err:
        raise f.error(ShapeError, str(err), e.pos) from None
