"""Elementwise ops → ONNX: unary functions, arithmetic, comparisons, logic, where, cast, GELU."""

from __future__ import annotations

from pseudoformer.backends.onnx.emitter import ELEM, Emitter
from pseudoformer.backends.onnx.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

_UNARY = {
    Op.NEG: "Neg", Op.EXP: "Exp", Op.LOG: "Log", Op.SQRT: "Sqrt", Op.TANH: "Tanh", Op.ERF: "Erf",
    Op.SIN: "Sin", Op.COS: "Cos", Op.ABS: "Abs", Op.RELU: "Relu", Op.NOT: "Not",
    Op.FLOOR: "Floor", Op.CEIL: "Ceil",
}
_BINARY = {
    Op.ADD: "Add", Op.SUB: "Sub", Op.MUL: "Mul", Op.DIV: "Div", Op.POW: "Pow", Op.MAX: "Max",
    Op.MIN: "Min", Op.AND: "And", Op.OR: "Or",
    Op.LT: "Less", Op.LE: "LessOrEqual", Op.GT: "Greater", Op.GE: "GreaterOrEqual", Op.EQ: "Equal",
    Op.WHERE: "Where", Op.MATMUL: "MatMul",
}


@lowers(*_UNARY, *_BINARY)
def _plain(e: Emitter, n: Node) -> str:
    op_type = _UNARY.get(n.op) or _BINARY[n.op]
    return e.emit(op_type, [e.value(s) for s in n.src], out=e.out)


@lowers(Op.NE)
def _not_equal(e: Emitter, n: Node) -> str:
    return e.emit("Not", [e.emit("Equal", [e.value(s) for s in n.src])], out=e.out)


# ONNX Mod with fmod=0 is the floored remainder, but only on integers; on floats it needs fmod=1, C's
# truncated remainder, so a float mod is lowered as its formula a − b·⌊a/b⌋ (ir/ops/elementwise.py).
@lowers(Op.MOD, when=lambda n, opset: not n.dtype.is_float)
def _mod(e: Emitter, n: Node) -> str:
    return e.emit("Mod", [e.value(s) for s in n.src], out=e.out, fmod=0)


@lowers(Op.CAST)
def _cast(e: Emitter, n: Node) -> str:
    return e.emit("Cast", [e.value(n.src[0])], out=e.out, to=ELEM[n.dtype])


# Gelu is opset 20's; before, the backend lowers GELU's formula (ir/ops/gelu.py).
@lowers(Op.GELU, when=lambda n, opset: opset >= 20)
def _gelu(e: Emitter, n: Node) -> str:
    return e.emit("Gelu", [e.value(n.src[0])], out=e.out, approximate=n.attrs.get("approximate", "none"))
