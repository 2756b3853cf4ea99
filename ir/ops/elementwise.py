"""Elementwise ops: unary functions, arithmetic, comparisons and logic (numpy/ONNX broadcasting), where, cast.

All of them map each output position to the same position of every operand, so every position
rule is the same, and the layout pass may give them any layout (each operand takes the output's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import Attr, IRTypeError, NodeMaker, OpDef, broadcast_all, register
from pseudoformer.ir.types import DType, TensorType


def every_operand(n: Any, dim: str) -> tuple[int, ...]:
    """The position rule of an elementwise op: output position t reads position t of each operand."""
    return tuple(range(len(n.src)))


def float_unary(src: Sequence[TensorType], attrs: Mapping[str, Any], op: Op) -> TensorType:
    if not src[0].dtype.is_float:
        raise IRTypeError(f"{op.value} needs a float operand, got {src[0]}")
    return src[0]


def unary(op: Op, doc: str, fn: Callable[[np.ndarray], np.ndarray], **traits: Any) -> OpDef:
    """A float → float function applied elementwise."""
    return OpDef(op, doc, 1, lambda src, attrs: float_unary(src, attrs, op), lambda n, a: fn(a[0]),
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
    Python's have (ONNX Mod on floats is C's fmod, which has the sign of a)."""
    a, b = n.src
    return make(Op.SUB, a, make(Op.MUL, b, make(Op.FLOOR, make(Op.DIV, a, b))))


def _binary_type(src: Sequence[TensorType], op: Op, result: DType | None = None, need: DType | None = None,
                 ) -> TensorType:
    a, b = src
    if a.dtype != b.dtype:
        raise IRTypeError(f"{op.value} on mixed dtypes {a} and {b}")
    if need is not None and a.dtype is not need:
        raise IRTypeError(f"{op.value} needs bool operands")
    return TensorType(result or a.dtype, broadcast_all(op, src))


def binary(op: Op, doc: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], *, result: DType | None = None,
           need: DType | None = None, precision: str = "half") -> OpDef:
    return OpDef(op, doc, 2, lambda src, attrs: _binary_type(src, op, result, need), lambda n, a: fn(a[0], a[1]),
                 elementwise=True, positions=every_operand, layout="elementwise", precision=precision)


def _where(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    if src[0].dtype is not DType.bool:
        raise IRTypeError(f"where's condition must be bool, got {src[0]}")
    if src[1].dtype != src[2].dtype:
        raise IRTypeError(f"where on mixed dtypes {src[1]} and {src[2]}")
    return TensorType(src[1].dtype, broadcast_all(Op.WHERE, src))


# Comparisons by their relation symbol, as INDEX_MASK and the frontend spell them.
RELATIONS = {"<": Op.LT, "<=": Op.LE, ">": Op.GT, ">=": Op.GE, "==": Op.EQ, "!=": Op.NE}
COMPARE_FNS: dict[Op, Callable[[Any, Any], np.ndarray]] = {
    Op.LT: np.less, Op.LE: np.less_equal, Op.GT: np.greater, Op.GE: np.greater_equal, Op.EQ: np.equal,
    Op.NE: np.not_equal,
}

register(
    unary(Op.NEG, "−x", np.negative),
    unary(Op.EXP, "exp x", np.exp),
    unary(Op.LOG, "log x", np.log),
    unary(Op.SQRT, "√x", np.sqrt),
    unary(Op.TANH, "tanh x", np.tanh),
    unary(Op.SIN, "sin x", np.sin),
    unary(Op.COS, "cos x", np.cos),
    unary(Op.ABS, "|x|", np.abs),
    unary(Op.RELU, "max(x, 0)", _relu),
    unary(Op.FLOOR, "⌊x⌋", np.floor),
    unary(Op.CEIL, "⌈x⌉", np.ceil),
    OpDef(Op.NOT, "¬x of a bool", 1, _not, lambda n, a: np.logical_not(a[0]), elementwise=True,
          positions=every_operand, layout="elementwise"),
    OpDef(Op.CAST, "x converted to dtype", 1, _cast, lambda n, a: a[0].astype(np.dtype(n.attrs["dtype"].value)),
          attrs=(Attr("dtype", "dtype"),), elementwise=True, positions=every_operand, layout="elementwise",
          precision="follower"),
    binary(Op.ADD, "a + b", np.add, precision="follower"),
    binary(Op.SUB, "a − b", np.subtract, precision="follower"),
    binary(Op.MUL, "a ⊙ b", np.multiply, precision="follower"),
    binary(Op.DIV, "a / b (integers truncate toward zero)", _div, precision="follower"),
    binary(Op.POW, "a^b", np.power, precision="follower"),
    OpDef(Op.MOD, "a mod b, floored: the remainder has the sign of b (integers or floats)", 2,
          lambda src, attrs: _binary_type(src, Op.MOD), lambda n, a: np.mod(a[0], a[1]), elementwise=True,
          positions=every_operand, layout="elementwise", precision="anchor", decompose=_mod_formula),
    binary(Op.MAX, "max(a, b)", np.maximum, precision="follower"),
    binary(Op.MIN, "min(a, b)", np.minimum, precision="follower"),
    *(binary(op, f"a {rel} b", COMPARE_FNS[op], result=DType.bool) for rel, op in RELATIONS.items()),
    binary(Op.AND, "a ∧ b", np.logical_and, need=DType.bool),
    binary(Op.OR, "a ∨ b", np.logical_or, need=DType.bool),
    OpDef(Op.WHERE, "where(cond, a, b)", 3, _where, lambda n, a: np.where(a[0], a[1], a[2]), elementwise=True,
          positions=every_operand, layout="elementwise", precision="follower"),
)
