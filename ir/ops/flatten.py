"""FLATTEN and RESHAPE_LIKE: a tensor made a matrix, and back.

    flatten(x; axis)       [d₀ … d_{a−1}, d_a … d_{r−1}] → [d₀ ⋯ d_{a−1}, d_a ⋯ d_{r−1}]   (ONNX Flatten)
    reshape_like(y, like)  y's elements in like's shape (like's values unread)        (ONNX Reshape)

A merged symbolic size is written as the product of its parts ("batch*seq"). RESHAPE cannot say
either: its symbolic target sizes are read off its own operand, and the product of two run-time
sizes is not one of them, nor are the parts of a product. Flatten is what folds a batch into a
product's rows (passes/rules/batched_weight_gradient.py); reshape_like is its transpose.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import Attr, EvalError, ExampleMaker, IRTypeError, OpDef, register
from pseudoformer.ir.types import Dim, DType, TensorType


def product(dims: Sequence[Dim]) -> Dim:
    """The size of the axes `dims` merged: an int when all are known, else their product written out."""
    if all(isinstance(d, int) for d in dims):
        return math.prod(dims)  # type: ignore[arg-type]
    known = math.prod(d for d in dims if isinstance(d, int))
    parts = [str(d) for d in dims if isinstance(d, str)]
    return "*".join(parts if known == 1 else [*parts, str(known)])


def _flatten(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x, ax = src[0], attrs["axis"]
    if not 0 <= ax <= x.rank:
        raise IRTypeError(f"flatten axis {ax} out of range for {x}")
    return TensorType(x.dtype, (product(x.shape[:ax]), product(x.shape[ax:])))


def _reshape_like(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    y, like = src
    if all(isinstance(d, int) for d in (*y.shape, *like.shape)) and math.prod(y.shape) != math.prod(like.shape):
        raise IRTypeError(f"reshape of {y} to the shape of {like} changes the element count")
    return TensorType(y.dtype, like.shape)


def _reshape_like_impl(n: Any, a: list[np.ndarray]) -> np.ndarray:
    y, like = a
    if y.size != like.size:
        raise EvalError(f"reshape of {y.shape} to {like.shape}: {y.size} elements, not {like.size}")
    return y.reshape(like.shape)


def _x(make: ExampleMaker) -> Any:
    return make.input("x", DType.float32, "batch", 4, "seq")


register(
    OpDef(Op.FLATTEN, "the axes before `axis` merged into rows, the rest into columns", 1, _flatten,
          lambda n, a: a[0].reshape(math.prod(a[0].shape[: n.attrs["axis"]]), -1),
          attrs=(Attr("axis", "int"),), precision="follower",
          example=lambda make: [make(Op.FLATTEN, _x(make), axis=a) for a in (2, 1, 0)],
          vjp=lambda n, ct, make: (make(Op.RESHAPE_LIKE, ct, n.src[0]),)),
    OpDef(Op.RESHAPE_LIKE, "y's elements in like's shape (like's values unread)", 2, _reshape_like,
          _reshape_like_impl, precision="follower",
          example=lambda make: [make(Op.RESHAPE_LIKE, make(Op.FLATTEN, make.input("y", DType.float32, "batch", 4,
                                                                                  "seq"), axis=2), _x(make))],
          vjp=lambda n, ct, make: (make(Op.RESHAPE_LIKE, ct, n.src[0]), None)),
)
