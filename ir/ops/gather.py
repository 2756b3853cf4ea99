"""GATHER: numpy.take — the indices' axes replace the data's axis (embedding lookups, picked positions)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.cotangents import zeros_like
from pseudoformer.ir.ops.movement import along_axis
from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import Attr, ExampleMaker, IRTypeError, OpDef, axis_of, integers, register
from pseudoformer.ir.types import DType, TensorType


def _type(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    data, idx = src
    if idx.dtype is not DType.int64:
        raise IRTypeError(f"gather indices must be int64, got {idx}")
    ax = axis_of(attrs["axis"], data.rank)
    return TensorType(data.dtype, data.shape[:ax] + idx.shape + data.shape[ax + 1:])


def _positions(n: Any, dim: str) -> tuple[int, ...] | str:
    data, idx = n.src
    if along_axis(n, dim):
        return "gather along the position axis"
    if dim in idx.shape:
        # token embedding lookup: indices per position (data that has them too would repeat the axis)
        return (1,) if dim not in data.shape else "gather of positions by positions"
    return (0,)


def _example(make: ExampleMaker) -> list[Any]:
    """Token ids into the columns of an embedding, and rows of an input counted from the end (negative)."""
    ids = make.input("ids", DType.int64, "batch", "seq", values=integers(0, 11))
    x = make.input("x", DType.float32, "batch", 4, "seq")
    back = make(Op.SUB, make.input("rows", DType.int64, 3, values=integers(0, 4)), make.const(4, DType.int64))
    return [make(Op.GATHER, make.param("W_e", DType.float32, 8, 11), ids, axis=1), make(Op.GATHER, x, back, axis=-2)]


def _vjp(n: Any, ct: Any, make: Any) -> tuple[Any, None]:
    """A gather transposes to a scatter-add: rows read twice (a token seen twice) get both cotangents.
    Indices counted from the end (negative, as numpy.take reads them) are made positive first."""
    data, idx = n.src
    axis = n.attrs["axis"] % data.type.rank
    size = data.shape[axis]
    count = make.const(size, DType.int64) if isinstance(size, int) else make(Op.DIM, data, axis=axis)
    idx = make(Op.WHERE, make(Op.LT, idx, make.const(0, DType.int64)), make(Op.ADD, idx, count), idx)
    return make(Op.SCATTER_ADD, zeros_like(make, data), idx, ct, axis=axis), None


register(OpDef(Op.GATHER, "data[..., indices, ...] on one axis", 2, _type,
               lambda n, a: np.take(a[0], a[1], axis=n.attrs["axis"]), attrs=(Attr("axis", "int"),),
               positions=_positions, layout="gather", example=_example, vjp=_vjp))
