"""SiLU and the SwiGLU gate (Shazeer, 2020), the MLP of Llama, Mistral and Qwen2.

    SILU(x)          = x σ(x) = x / (1 + e^{−x})                      elementwise, the `SiLU` builtin
    SWIGLU(h; axis)  = SILU(h₁) ⊙ h₂,  h₁, h₂ the two halves of h along axis

The SwiGLU fusion (passes/rules/swiglu.py) makes SWIGLU from `SiLU(W_1 X) ⊙ W_3 X`, with h = [W_1; W_3] X
the gate and up projections packed into one product. Both decompose into their formulas for a backend
without a kernel (ONNX has none for either before opset 24's Swish).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.elementwise import unary
from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.reductions import along_positions
from pseudoformer.ir.ops.registry import Attr, ExampleMaker, IRTypeError, NodeMaker, OpDef, axis_of, register
from pseudoformer.ir.types import DType, TensorType


def silu(x: np.ndarray) -> np.ndarray:
    """x σ(x) in float64, rounded once to x's dtype; e^{−x} overflowing to ∞ gives the −0 it tends to."""
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore"):
        return (x64 / (1.0 + np.exp(-x64))).astype(x.dtype)


def _silu_formula(n: Any, make: NodeMaker) -> Any:
    (x,) = n.src
    one = make.const(1.0, x.dtype)
    return make(Op.DIV, x, make(Op.ADD, one, make(Op.EXP, make(Op.NEG, x))))


def _halves(x: TensorType, axis: int) -> int:
    ax = axis_of(axis, x.rank)
    width = x.shape[ax]
    if not isinstance(width, int) or width % 2:
        raise IRTypeError(f"swiglu along axis {ax} of {x}: the axis must have a known even size")
    return width // 2


def _swiglu_type(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    (x,) = src
    if not x.dtype.is_float:
        raise IRTypeError(f"swiglu needs a float operand, got {x}")
    ax = axis_of(attrs["axis"], x.rank)
    return TensorType(x.dtype, x.shape[:ax] + (_halves(x, ax),) + x.shape[ax + 1:])


def _swiglu(n: Any, a: list[np.ndarray]) -> np.ndarray:
    gate, up = np.split(a[0], 2, axis=n.attrs["axis"])
    return (silu(gate) * up).astype(a[0].dtype)


def _swiglu_formula(n: Any, make: NodeMaker) -> Any:
    (h,) = n.src
    axis = n.attrs["axis"] % h.type.rank
    half = _halves(h.type, axis)

    def part(start: int) -> Any:
        bounds = (make.const(start, DType.int64), make.const(start + half, DType.int64))
        return make(Op.SLICE, h, *bounds, axis=axis, dim=half)

    return make(Op.MUL, make(Op.SILU, part(0)), part(half))


def _swiglu_example(make: ExampleMaker) -> list[Any]:
    h = make.input("h", DType.float32, "batch", 6, "seq")
    rows = make.input("rows", DType.float32, "seq", 4)
    return [make(Op.SWIGLU, h, axis=1), make(Op.SWIGLU, h, axis=-2), make(Op.SWIGLU, rows, axis=-1)]


def _silu_vjp(n: Any, ct: Any, make: NodeMaker) -> tuple[Any]:
    """SiLU's own rule, σ + x σ(1 − σ): the quotient of its formula would give ∞/∞ where e^{−x} overflows."""
    (x,) = n.src
    one = make.const(1.0, x.dtype)
    s = make(Op.DIV, one, make(Op.ADD, one, make(Op.EXP, make(Op.NEG, x))))
    d = make(Op.ADD, s, make(Op.MUL, make(Op.MUL, x, s), make(Op.SUB, one, s)))
    return (make(Op.MUL, ct, d),)


register(
    unary(Op.SILU, "x σ(x)", silu, decompose=_silu_formula, vjp=_silu_vjp),
    OpDef(Op.SWIGLU, "SiLU(h₁) ⊙ h₂ of the halves of h along an axis", 1, _swiglu_type, _swiglu,
          attrs=(Attr("axis", "int"),), positions=along_positions, layout="axis", precision="follower",
          decompose=_swiglu_formula, example=_swiglu_example),
)
