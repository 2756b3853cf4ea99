"""Elementwise ops: unary functions, arithmetic, comparisons and logic (numpy/ONNX broadcasting), where, cast.

All of them map each output position to the same position of every operand, so every position
rule is the same, and the layout pass may give them any layout (each operand takes the output's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.cotangents import binary as grads
from pseudoformer.ir.ops.cotangents import const, unbroadcast
from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import (
    Attr,
    Example,
    ExampleMaker,
    IRTypeError,
    NodeMaker,
    OpDef,
    Values,
    broadcast_all,
    integers,
    register,
    uniform,
)
from pseudoformer.ir.types import DType, TensorType


def every_operand(n: Any, dim: str) -> tuple[int, ...]:
    """The position rule of an elementwise op: output position t reads position t of each operand."""
    return tuple(range(len(n.src)))


def float_unary(src: Sequence[TensorType], attrs: Mapping[str, Any], op: Op) -> TensorType:
    if not src[0].dtype.is_float:
        raise IRTypeError(f"{op.value} needs a float operand, got {src[0]}")
    return src[0]


F32 = DType.float32


def unary(op: Op, doc: str, fn: Callable[..., np.ndarray], *, attrs: tuple[Attr, ...] = (),
          cases: Sequence[Mapping[str, Any]] = ({},), domain: Values | None = None, **traits: Any) -> OpDef:
    """A float → float function applied elementwise, `fn(x, **attributes)` (defaults filled in).

    Its example applies it to one float input, drawn in `domain` if the function has one, once for each
    set of attributes in `cases`.
    """
    def impl(n: Any, a: list[np.ndarray]) -> np.ndarray:
        return fn(a[0], **{at.name: n.attrs.get(at.name, at.default) for at in attrs})

    def example(make: ExampleMaker) -> list[Any]:
        x = make.input("x", F32, "batch", 4, "seq", values=domain)
        return [make(op, x, **case) for case in cases]

    traits.setdefault("example", example)
    traits.setdefault("vjp", VJPS.get(op))
    return OpDef(op, doc, 1, lambda src, attrs: float_unary(src, attrs, op), impl, attrs=attrs,
                 elementwise=True, positions=every_operand, layout="elementwise", precision="follower", **traits)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.zeros((), x.dtype))


def _not(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    if src[0].dtype is not DType.bool:
        raise IRTypeError(f"not needs a bool operand, got {src[0]}")
    return src[0]


def _cast(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    return TensorType(attrs["dtype"], src[0].shape)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        # Integer division truncates toward zero, as in ONNX Div and C; numpy's // floors.
        q = np.abs(a) // np.abs(b)
        return np.where((a < 0) != (b < 0), -q, q)
    return np.divide(a, b)


def _mod_formula(n: Any, make: NodeMaker) -> Any:
    """a mod b = a − b·⌊a/b⌋ on floats: the floored remainder, which has the sign of b as numpy's and
    Python's have (ONNX Mod on floats is C's fmod, which has the sign of a). On integers, whose
    division truncates, r = a − b·(a/b) has the sign of a; a nonzero r of the other sign than b
    gets b added."""
    a, b = n.src
    if n.dtype.is_float:
        return make(Op.SUB, a, make(Op.MUL, b, make(Op.FLOOR, make(Op.DIV, a, b))))
    r = make(Op.SUB, a, make(Op.MUL, b, make(Op.DIV, a, b)))
    zero = make.const(0, n.dtype)
    wrong_sign = make(Op.AND, make(Op.NE, r, zero), make(Op.NE, make(Op.LT, r, zero), make(Op.LT, b, zero)))
    return make(Op.WHERE, wrong_sign, make(Op.ADD, r, b), r)


def _binary_type(src: Sequence[TensorType], op: Op, result: DType | None = None, need: DType | None = None,
                 ) -> TensorType:
    a, b = src
    if a.dtype != b.dtype:
        raise IRTypeError(f"{op.value} on mixed dtypes {a} and {b}")
    if need is not None and a.dtype is not need:
        raise IRTypeError(f"{op.value} needs bool operands")
    return TensorType(result or a.dtype, broadcast_all(op, src))


def binary(op: Op, doc: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], *, result: DType | None = None,
           need: DType | None = None, precision: str = "half", values: tuple[Values | None, Values | None] = (None, None),
           example: Example | None = None, vjp: Any = None) -> OpDef:
    """An elementwise function of two operands of one dtype (`need`, if only one will do), broadcast.

    Its example takes a [batch, 4, seq] operand and a [4, 1] one, drawn by `values` (a base or a
    divisor in the function's domain), and each the other way round.
    """
    def operands(make: ExampleMaker) -> list[Any]:
        dtype = need or F32
        a = make.input("a", dtype, "batch", 4, "seq", values=values[0])
        b = make.input("b", dtype, 4, 1, values=values[1])
        return [make(op, a, b), make(op, make.input("a2", dtype, 4, 1, values=values[0]),
                                     make.input("b2", dtype, "batch", 4, "seq", values=values[1]))]

    return OpDef(op, doc, 2, lambda src, attrs: _binary_type(src, op, result, need), lambda n, a: fn(a[0], a[1]),
                 elementwise=True, positions=every_operand, layout="elementwise", precision=precision,
                 example=example or operands, vjp=vjp)


def _integer_cases(op: Op, divisor: Values) -> Example:
    """Floats, and int64 dividends of both signs over a divisor of either sign (truncation vs flooring)."""
    def cases(make: ExampleMaker) -> list[Any]:
        a, b = make.input("a", F32, "batch", 4, "seq"), make.input("b", F32, 4, 1, values=divisor)
        i = make.input("i", DType.int64, "batch", 4, "seq", values=integers(-20, 20))
        j = make.input("j", DType.int64, 4, 1, values=lambda rng, shape: rng.choice([-3, -2, 2, 5], shape))
        return [make(op, a, b), make(op, i, j)]

    return cases


def _where_example(make: ExampleMaker) -> list[Any]:
    c = make.input("c", DType.bool, "batch", 1, "seq")
    a, b = make.input("a", F32, "batch", 4, "seq"), make.input("b", F32, 4, 1)
    return [make(Op.WHERE, c, a, b)]


def _cast_example(make: ExampleMaker) -> list[Any]:
    x = make.input("x", F32, "batch", 4, "seq", values=uniform(-30, 30))
    flags = make.input("flags", DType.bool, "batch", 4, "seq")
    return [make(Op.CAST, x, dtype=DType.int64), make(Op.CAST, flags, dtype=F32),
            make(Op.CAST, make(Op.CAST, x, dtype=DType.int64), dtype=F32)]


def _not_example(make: ExampleMaker) -> list[Any]:
    return [make(Op.NOT, make.input("flags", DType.bool, "batch", 4, "seq"))]


def _where(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    if src[0].dtype is not DType.bool:
        raise IRTypeError(f"where's condition must be bool, got {src[0]}")
    if src[1].dtype != src[2].dtype:
        raise IRTypeError(f"where on mixed dtypes {src[1]} and {src[2]}")
    return TensorType(src[1].dtype, broadcast_all(Op.WHERE, src))


# ---- VJP rules (see cotangents.py): n is the result y, ct its cotangent; `m` makes nodes.
M = Op.MUL


def _one(f: Callable[[Any, Any, Any, Any], Any]) -> Callable[[Any, Any, NodeMaker], tuple[Any]]:
    return lambda n, ct, m: (f(n, ct, m, n.src[0]),)


def _where_vjp(n: Any, ct: Any, m: NodeMaker) -> tuple[Any, Any, Any]:
    c, a, b = n.src
    zero = const(m, 0, ct)
    return None, unbroadcast(m, m(Op.WHERE, c, ct, zero), a), unbroadcast(m, m(Op.WHERE, c, zero, ct), b)


def _pick(first: bool) -> Any:
    """max/min: the cotangent goes to the operand that won (to a on a tie)."""
    def rule(n: Any, ct: Any, m: NodeMaker, a: Any, b: Any) -> tuple[Any, Any]:
        won = m(Op.GE if first else Op.LE, a, b)
        zero = const(m, 0, ct)
        return m(Op.WHERE, won, ct, zero), m(Op.WHERE, won, zero, ct)
    return rule


VJPS: dict[Op, Any] = {
    Op.NEG: _one(lambda n, ct, m, x: m(Op.NEG, ct)),
    Op.EXP: _one(lambda n, ct, m, x: m(M, ct, n)),
    Op.LOG: _one(lambda n, ct, m, x: m(Op.DIV, ct, x)),
    Op.SQRT: _one(lambda n, ct, m, x: m(Op.DIV, ct, m(M, n, const(m, 2, x)))),
    Op.TANH: _one(lambda n, ct, m, x: m(M, ct, m(Op.SUB, const(m, 1, x), m(M, n, n)))),
    Op.SIN: _one(lambda n, ct, m, x: m(M, ct, m(Op.COS, x))),
    Op.COS: _one(lambda n, ct, m, x: m(Op.NEG, m(M, ct, m(Op.SIN, x)))),
    Op.ABS: _one(lambda n, ct, m, x: m(Op.WHERE, m(Op.LT, x, const(m, 0, x)), m(Op.NEG, ct), ct)),
    Op.RELU: _one(lambda n, ct, m, x: m(Op.WHERE, m(Op.GT, x, const(m, 0, x)), ct, const(m, 0, x))),
    Op.FLOOR: lambda n, ct, m: (None,),  # piecewise constant: no gradient
    Op.CEIL: lambda n, ct, m: (None,),
    Op.CAST: _one(lambda n, ct, m, x: m(Op.CAST, ct, dtype=x.dtype) if x.dtype.is_float else None),
    Op.ADD: grads(lambda n, ct, m, a, b: (ct, ct)),
    Op.SUB: grads(lambda n, ct, m, a, b: (ct, m(Op.NEG, ct))),
    Op.MUL: grads(lambda n, ct, m, a, b: (m(M, ct, b), m(M, ct, a))),
    Op.DIV: grads(lambda n, ct, m, a, b: (m(Op.DIV, ct, b), m(Op.NEG, m(Op.DIV, m(M, ct, n), b)))),
    Op.POW: grads(lambda n, ct, m, a, b: (m(M, ct, m(M, b, m(Op.POW, a, m(Op.SUB, b, const(m, 1, b))))),
                                          m(M, ct, m(M, n, m(Op.LOG, a))))),
    Op.MOD: grads(lambda n, ct, m, a, b: (ct, m(Op.NEG, m(M, ct, m(Op.FLOOR, m(Op.DIV, a, b)))))),
    Op.MAX: grads(_pick(True)),
    Op.MIN: grads(_pick(False)),
    Op.WHERE: _where_vjp,
}

# Comparisons by their relation symbol, as INDEX_MASK and the frontend spell them.
RELATIONS = {"<": Op.LT, "<=": Op.LE, ">": Op.GT, ">=": Op.GE, "==": Op.EQ, "!=": Op.NE}
COMPARE_FNS: dict[Op, Callable[[Any, Any], np.ndarray]] = {
    Op.LT: np.less, Op.LE: np.less_equal, Op.GT: np.greater, Op.GE: np.greater_equal, Op.EQ: np.equal,
    Op.NE: np.not_equal,
}

register(
    unary(Op.NEG, "−x", np.negative),
    unary(Op.EXP, "exp x", np.exp),
    unary(Op.LOG, "log x", np.log, domain=uniform(0.05, 4)),
    unary(Op.SQRT, "√x", np.sqrt, domain=uniform(0, 4)),
    unary(Op.TANH, "tanh x", np.tanh),
    unary(Op.SIN, "sin x", np.sin),
    unary(Op.COS, "cos x", np.cos),
    unary(Op.ABS, "|x|", np.abs),
    unary(Op.RELU, "max(x, 0)", _relu),
    unary(Op.FLOOR, "⌊x⌋", np.floor),
    unary(Op.CEIL, "⌈x⌉", np.ceil),
    OpDef(Op.NOT, "¬x of a bool", 1, _not, lambda n, a: np.logical_not(a[0]), elementwise=True,
          positions=every_operand, layout="elementwise", example=_not_example),
    OpDef(Op.CAST, "x converted to dtype", 1, _cast, lambda n, a: a[0].astype(np.dtype(n.attrs["dtype"].value)),
          attrs=(Attr("dtype", "dtype"),), elementwise=True, positions=every_operand, layout="elementwise",
          precision="follower", example=_cast_example, vjp=VJPS[Op.CAST]),
    binary(Op.ADD, "a + b", np.add, precision="follower", vjp=VJPS[Op.ADD]),
    binary(Op.SUB, "a − b", np.subtract, precision="follower", vjp=VJPS[Op.SUB]),
    binary(Op.MUL, "a ⊙ b", np.multiply, precision="follower", vjp=VJPS[Op.MUL]),
    binary(Op.DIV, "a / b (integers truncate toward zero)", _div, precision="follower",
           example=_integer_cases(Op.DIV, uniform(0.5, 2)), vjp=VJPS[Op.DIV]),
    binary(Op.POW, "a^b", np.power, precision="follower", values=(uniform(0.1, 3), None), vjp=VJPS[Op.POW]),
    OpDef(Op.MOD, "a mod b, floored: the remainder has the sign of b (integers or floats)", 2,
          lambda src, attrs: _binary_type(src, Op.MOD), lambda n, a: np.mod(a[0], a[1]), elementwise=True,
          positions=every_operand, layout="elementwise", precision="anchor", decompose=_mod_formula,
          vjp=VJPS[Op.MOD], example=_integer_cases(Op.MOD, lambda rng, shape: rng.choice([-3.0, -0.5, 0.75, 3.0], shape).astype(np.float32))),
    binary(Op.MAX, "max(a, b)", np.maximum, precision="follower", vjp=VJPS[Op.MAX]),
    binary(Op.MIN, "min(a, b)", np.minimum, precision="follower", vjp=VJPS[Op.MIN]),
    *(binary(op, f"a {rel} b", COMPARE_FNS[op], result=DType.bool, values=(integers(-2, 3, np.float32),) * 2)
      for rel, op in RELATIONS.items()),  # whole numbers, which are often equal
    binary(Op.AND, "a ∧ b", np.logical_and, need=DType.bool),
    binary(Op.OR, "a ∨ b", np.logical_or, need=DType.bool),
    OpDef(Op.WHERE, "where(cond, a, b)", 3, _where, lambda n, a: np.where(a[0], a[1], a[2]), elementwise=True,
          positions=every_operand, layout="elementwise", precision="follower", example=_where_example,
          vjp=_where_vjp),
)
