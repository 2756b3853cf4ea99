"""TOPK: the k largest entries along an axis, largest first, or their positions (top-k and argtop-k in the
notation; a mixture of experts' routing). Ties go to the lower position, as ONNX TopK and numpy's stable sort
order them, so an argtop-1 is the argmax. k is a dim: a size's name while a model is checked without its
configuration, a number once it is compiled."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.one_hot_vjp import scatter_back
from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.reductions import along_positions
from pseudoformer.ir.ops.registry import Attr, ExampleMaker, IRTypeError, OpDef, axis_of, register
from pseudoformer.ir.types import DType, TensorType


def _type(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    (x,) = src
    axis = axis_of(attrs["axis"], x.rank)
    k, n = attrs["k"], x.shape[axis]
    if isinstance(k, int) and (k < 1 or (isinstance(n, int) and k > n)):
        raise IRTypeError(f"top-{k} along an axis of {n} entries: k must be between 1 and {n}")
    if x.dtype is DType.bool:
        raise IRTypeError(f"top-{k} of bool {x}: cast to a number first")
    dtype = DType.int64 if attrs["result"] == "indices" else x.dtype
    return TensorType(dtype, tuple(k if i == axis else d for i, d in enumerate(x.shape)))


def topk(x: np.ndarray, k: int, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, 0-based positions) of the k largest along `axis`, largest first, ties to the lower position."""
    order = np.argsort(-x, axis=axis, kind="stable")  # stable: equal entries keep their order
    pos = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, pos, axis=axis), pos.astype(np.int64)


def _impl(n: Any, a: list[np.ndarray]) -> np.ndarray:
    values, positions = topk(a[0], n.attrs["k"], n.attrs["axis"] % a[0].ndim)
    return positions if n.attrs["result"] == "indices" else values


def _vjp(n: Any, ct: Any, make: Any) -> tuple[Any]:
    """The values' cotangent back at the positions they came from (the positions have none)."""
    if n.attrs["result"] == "indices":
        return (None,)
    positions = make(Op.TOPK, n.src[0], k=n.attrs["k"], axis=n.attrs["axis"], result="indices")
    return (scatter_back(make, ct, positions, n.src[0], n.attrs["axis"] % n.src[0].type.rank),)


def _example(make: ExampleMaker) -> list[Any]:
    """Both results, along the last axis and a middle one, and k = 1 (the argmax)."""
    x = make.input("x", DType.float32, "batch", 5, "seq")
    return [make(Op.TOPK, x, k=k, axis=axis, result=r)
            for k, axis, r in ((2, 1, "values"), (2, 1, "indices"), (1, -2, "indices"), (3, 1, "values"))]


register(OpDef(Op.TOPK, "the k largest entries along an axis, largest first (or their 0-based positions)", 1,
               _type, _impl,
               attrs=(Attr("k", "dim"), Attr("axis", "int"), Attr("result", "str", "values", ("values", "indices"))),
               positions=along_positions, layout="axis", example=_example, vjp=_vjp))
