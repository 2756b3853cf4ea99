"""Evaluating expressions: `ev` dispatches on an expression's form to the handler registered for it.

Each module of this package handles a family of forms and registers its handlers here
(`@handles("add", "sub")`); calls.py registers the call form, since a call inlines an algorithm
whose body is evaluated in turn. Handlers and callers reach each other through this table, so the
mutual recursion of expressions and algorithm calls needs no import cycle.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pseudoformer.frontend.ast import Expr
from pseudoformer.frontend.errors import BadTypeError, ShapeError
from pseudoformer.frontend.frame import Frame
from pseudoformer.frontend.params import GroupVal
from pseudoformer.frontend.sizes import Size
from pseudoformer.frontend.tensor_ops import ShapeMismatch, show, show_size
from pseudoformer.frontend.values import SizeVal, Val
from pseudoformer.ir import DType, Op
from pseudoformer.ir.ops import IRTypeError

Handler = Callable[[Frame, Expr], Any]
HANDLERS: dict[str, Handler] = {}


def handles(*forms: str) -> Callable[[Handler], Handler]:
    """Register `fn` as the evaluator of expressions of these forms (Expr.op)."""
    def register(fn: Handler) -> Handler:
        for form in forms:
            HANDLERS[form] = fn
        return fn
    return register


def ev(f: Frame, e: Expr) -> Any:
    """Evaluate an expression; returns a Val, or a SizeVal / GroupVal / Family where the expression names one."""
    try:
        handler = HANDLERS.get(e.op)
        if handler is None:
            raise f.error(BadTypeError, _TRAINING_ONLY.get(e.op, f"{e.op} cannot be used here"), e.pos)
        return handler(f, e)
    except ShapeMismatch as m:
        raise f.shape_error(m, e.pos) from None
    except IRTypeError as m:
        # A combination of operands the frontend's own shape rules let through and the IR's typing
        # rejects: still the source's mistake, at the expression that made it.
        raise f.error(ShapeError, f"{describe(e)}: the operands do not fit ({m})", e.pos) from None


# The notation of Algorithms 11–13 that frontend/training.py reads and a model cannot use.
_TRAINING_ONLY = {
    "set": "a set {t ∈ [ℓ] : …} belongs to training algorithms (Algorithm 12's masked positions T̃); in a model, "
           "write a mask as an Iverson bracket [[…]]",
    "sum_over_set": "a sum over a set, Σ_{t ∈ T̃}, belongs to training algorithms (Algorithm 12's loss); in a model, "
                    "sum over a range, Σ_{t=1}^{ℓ}, times an Iverson bracket",
    "grad": "∇ belongs to training algorithms (θ ← θ − η · ∇loss(θ))",
}


def ev_val(f: Frame, e: Expr) -> Val:
    v = ev(f, e)
    if isinstance(v, SizeVal):
        return size_val(f, v.size, e.pos)
    if isinstance(v, Val):
        return v
    what = "a parameter group" if isinstance(v, GroupVal) else "a family of values"
    raise f.error(BadTypeError, f"{describe(e)} is {what}, not a value", e.pos)


def describe(e: Expr) -> str:
    """An expression as a message names it: `x`, `exp(…)`, `x[…]`; the tag alone (`index`) reads as nonsense."""
    if e.op == "call":
        return f"{e.text}(…)"
    if e.op == "index":
        return f"{describe(e.args[0])}[…]"
    if e.op == "transpose":
        return f"{describe(e.args[0])}ᵀ"
    return e.text or "this expression"


def const(f: Frame, value: float) -> Val:
    return Val(f.b.const(float(value)), "real", const=value)


def size_val(f: Frame, s: Size, pos: Any) -> Val:
    """A size used as a number in arithmetic."""
    s = f.b.resolve(s)
    if s.is_int:
        return const(f, s.value)
    return Val(f.b.node(Op.CAST, size_node(f, s, pos), dtype=DType.float32), "real")


def size_node(f: Frame, s: Size, pos: Any) -> Any:
    s = f.b.resolve(s)
    if s.is_int:
        return f.b.const(s.value, DType.int64)
    name = str(s)
    if name in f.b.run_dims:
        return f.b.run_dims[name]
    if f.root().symbolic:
        return f.b.const(1, DType.int64)
    if s.names() <= f.b.run_dims.keys():  # ℓ − 1, the bound of Σ_{t=1}^{ℓ−1}: computed from ℓ
        total = None
        for monomial, coef in s.terms:
            factors = [f.b.run_dims[name] for name in monomial]
            if coef != 1 or not factors:
                factors.insert(0, f.b.const(coef, DType.int64))
            term = factors[0]
            for x in factors[1:]:
                term = f.b.node(Op.MUL, term, x)
            total = term if total is None else f.b.node(Op.ADD, total, term)
        return total
    raise f.error(ShapeError, f"the size {name} is not known at run time", pos)


def shown(v: Any) -> str:
    return show(v) if isinstance(v, Val) else "not a value"


def as_size(v: Any) -> Size | None:
    """A count: a size, or a whole number written out (`for l = 1, 2, …, 3 do`, `Σ_{i=1}^{2}`); else None."""
    if isinstance(v, SizeVal):
        return v.size
    c = v.const if isinstance(v, Val) and not v.dims and not v.free else None
    if isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and c == int(c) and c >= 0:
        return Size.of(int(c))
    return None


def index_var_val(f: Frame, name: str, pos: Any) -> Val:
    mv = f.maps[name]
    if mv.size is None:
        ranges = ", ".join(f"{v} ∈ [{show_size(m.size) if m.size is not None else 'ℓ'}]" for v, m in f.maps.items()
                           if not v.startswith("⟨"))
        raise f.error(BadTypeError, f"the range of {name} is not known here: nothing indexed by {name} comes before "
                      f"this use, so say it in the map, `for {ranges} :` (ASCII `in`, LaTeX `\\in`)", pos)
    node = f.b.node(Op.ARANGE, size_node(f, mv.size, pos), dim=f.b.resolve(mv.size).dim())
    return Val(node, "index", (), ((mv.internal, mv.size),))
