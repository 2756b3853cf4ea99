"""LOG_SOFTMAX: z − log Σ exp z along an axis, computed stably (z − m − log Σ exp(z − m), m = max z).

The training pipeline's log_softmax rule (passes/rules/log_softmax.py) makes it from log ∘ softmax. As one op it
is one kernel forward (ONNX LogSoftmax, relax log_softmax) where the formula writes three tensors of z's size,
and its VJP is the short one, ct − softmax(z) · Σ ct: the formula's own cotangents also run through the max,
whose gradient cancels (the log-softmax does not change when z is shifted) but costs an argmax one-hot and its
products, each of z's size: for a language model's loss, [batch, ℓ, N_V].
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.reductions import _softmax_type, along_positions
from pseudoformer.ir.ops.registry import Attr, OpDef, register
from pseudoformer.ir.types import DType


def _impl(n: Any, a: list[np.ndarray]) -> np.ndarray:
    z = a[0]
    axis = n.attrs["axis"]
    shifted = z - np.max(z, axis=axis, keepdims=True)
    return (shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))).astype(z.dtype, copy=False)


def _vjp(n: Any, ct: Any, make: Any) -> tuple[Any]:
    """ct − exp(y) Σ ct, y the output: the Jacobian I − softmax 1ᵀ applied, never formed."""
    total = make(Op.REDUCE_SUM, ct, axes=[n.attrs["axis"]], keepdims=True)
    return (make(Op.SUB, ct, make(Op.MUL, make(Op.EXP, n), total)),)


register(OpDef(Op.LOG_SOFTMAX, "z − log Σ exp z along an axis (stable)", 1, _softmax_type, _impl,
               attrs=(Attr("axis", "int"),), positions=along_positions, layout="normalise", precision="anchor",
               example=lambda make: [make(Op.LOG_SOFTMAX, make.input("x", DType.float32, "batch", 4, "seq"), axis=a)
                                     for a in (1, -1)], vjp=_vjp))
