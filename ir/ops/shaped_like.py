"""Values shaped like another operand, which is read for its shape only: what the VJP rules write for
zeros, broadcasts and a slice's transpose (ir/ops/cotangents.py).

    expand(c, like)              c broadcast to like's shape              (ONNX Expand / ConstantOfShape)
    pad(c, like, start; axis)    zeros shaped like `like`, c at positions start … start + m − 1 of `axis`
                                 (c's other axes are like's)             (ONNX Pad)

Written as other ops, these were `cast(x < x)` (zeros: a pass over x and a bool tensor of its size),
`where(x < x, 0, c)` and a scatter into zeros with an int64 index of the whole result's size (a
slice of the loss's [B, ℓ, N_V] log-probabilities: 16 % of a GPT-2 step). As ops of their own every
backend gets the short form, and no backend has to recognise the formulas.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.cotangents import unbroadcast
from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import (
    Attr,
    EvalError,
    ExampleMaker,
    IRTypeError,
    OpDef,
    axis_of,
    register,
    scalar_int,
)
from pseudoformer.ir.types import DType, TensorType, broadcast_shapes


def _expand(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    c, like = src
    if c.rank > like.rank or broadcast_shapes(c.shape, like.shape) != like.shape:
        raise IRTypeError(f"expand of {c} to the shape of {like}: it does not broadcast to it")
    return TensorType(c.dtype, like.shape)


def _pad(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    c, like, start = src
    scalar_int(start, "pad start")
    ax = axis_of(attrs["axis"], like.rank)
    if c.rank != like.rank or any(c.shape[i] != like.shape[i] for i in range(c.rank) if i != ax):
        raise IRTypeError(f"pad of {c} into the shape of {like} on axis {ax}: the other axes differ")
    return TensorType(c.dtype, like.shape)


def _pad_impl(n: Any, a: list[np.ndarray]) -> np.ndarray:
    c, like, start = a
    ax, first = n.attrs["axis"] % c.ndim, int(start)
    if first < 0 or first + c.shape[ax] > like.shape[ax]:
        raise EvalError(f"pad of {c.shape[ax]} positions at {first} into an axis of size {like.shape[ax]}")
    out = np.zeros(like.shape, c.dtype)
    index: list[slice] = [slice(None)] * c.ndim
    index[ax] = slice(first, first + c.shape[ax])
    out[tuple(index)] = c
    return out


def _pad_vjp(n: Any, ct: Any, make: Any) -> tuple[Any, None, None]:
    """A pad transposes to the slice it filled."""
    c, _, start = n.src
    ax = n.attrs["axis"] % c.type.rank
    size = c.shape[ax]
    count = make.const(size, DType.int64) if isinstance(size, int) else make(Op.DIM, c, axis=ax)
    return make(Op.SLICE, ct, start, make(Op.ADD, start, count), axis=ax, dim=size), None, None


def _expand_example(make: ExampleMaker) -> list[Any]:
    x = make.input("x", DType.float32, "batch", 4, "seq")
    row = make.input("r", DType.float32, 4, 1)
    return [make(Op.EXPAND, row, x), make(Op.EXPAND, make.const(0.0, DType.float32), x),
            make(Op.EXPAND, make.input("y", DType.float32, "batch", 4, 1), x)]


def _pad_example(make: ExampleMaker) -> list[Any]:
    """A slice's transpose: its rows put back at 1 … (all but the first, a run-time count), and at 2 … 3."""
    x = make.input("x", DType.float32, "batch", 4, "seq")
    one, two = make.const(1, DType.int64), make.const(2, DType.int64)
    t = make.input("t", DType.float32, "batch", 4, "seq")
    tail = make(Op.SLICE, t, one, make(Op.DIM, t, axis=2), axis=2, dim="seq-1")
    return [make(Op.PAD, tail, x, one, axis=2),
            make(Op.PAD, make.input("u", DType.float32, "batch", 2, "seq"), x, two, axis=-2)]


register(
    OpDef(Op.EXPAND, "c broadcast to like's shape (like's values unread)", 2, _expand,
          lambda n, a: np.broadcast_to(a[0], a[1].shape).copy(), precision="follower",
          example=_expand_example, vjp=lambda n, ct, make: (unbroadcast(make, ct, n.src[0]), None)),
    OpDef(Op.PAD, "zeros shaped like `like` with c at positions start … on axis (like's values unread)", 3,
          _pad, _pad_impl, attrs=(Attr("axis", "int"),), precision="follower", example=_pad_example,
          vjp=_pad_vjp),
)
