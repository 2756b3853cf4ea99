"""GATHER_ELEMENTS: numpy.take_along_axis — out[…, a, …] = data[…, idx[…, a, …], …] along one axis, the other axes
broadcast between data and indices (each a unit axis or the same size). An index computed from map variables into
per-example data that shares one of them, the patches of an image `X[c, p(t) + i, q(t) + j]`, reads one entry per
output this way, where a one-hot sum over the indexed axis would build data × indexed axis."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.cotangents import zeros_like
from pseudoformer.ir.ops.one_hot_vjp import scatter_back
from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import Attr, ExampleMaker, IRTypeError, OpDef, axis_of, integers, register
from pseudoformer.ir.types import DType, TensorType


def _type(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    data, idx = src
    if idx.dtype is not DType.int64 or idx.rank != data.rank:
        raise IRTypeError(f"gather_elements of {data} by {idx}: the indices are int64 of the data's rank")
    ax = axis_of(attrs["axis"], data.rank)
    dims = []
    for k, (a, b) in enumerate(zip(data.shape, idx.shape, strict=True)):
        if k == ax:
            dims.append(b)
        elif a == b or b == 1:
            dims.append(a)
        elif a == 1:
            dims.append(b)
        else:
            raise IRTypeError(f"gather_elements of {data} by {idx}: axis {k} does not broadcast")
    return TensorType(data.dtype, tuple(dims))


def _impl(n: Any, a: list[np.ndarray]) -> np.ndarray:
    data, idx = a
    axis = n.attrs["axis"] % data.ndim
    if idx.size and (idx.min() < 0 or idx.max() >= data.shape[axis]):
        raise IndexError(f"gather_elements: indices from {idx.min()} to {idx.max()}, out of range for an axis of "
                         f"size {data.shape[axis]}")
    return np.take_along_axis(data, idx, axis=axis)


def _positions(n: Any, dim: str) -> tuple[int, ...] | str:
    data, idx = n.src
    if data.shape[n.attrs["axis"] % data.type.rank] == dim:
        return "gather along the position axis"
    return (0, 1) if dim in idx.shape else (0,)


def _vjp(n: Any, ct: Any, make: Any) -> tuple[Any, None]:
    """A scatter-add of the cotangent into zeros where the indices have the output's shape and the data its sizes
    off the axis (the loss's pick, a ViT's patches); a one-hot sum where either was broadcast (a routing table
    shared by the batch), which only short axes take."""
    data, idx = n.src
    axis = n.attrs["axis"] % data.type.rank
    if idx.shape == n.shape and all(data.shape[k] == n.shape[k] for k in range(data.type.rank) if k != axis):
        return make(Op.SCATTER_ADD_ELEMENTS, zeros_like(make, data), idx, ct, axis=axis), None
    return scatter_back(make, ct, idx, data, axis), None


def _example(make: ExampleMaker) -> list[Any]:
    """Per-example data [batch, 6, 3] read at rows that vary along its last axis and a new one (broadcast), and
    along its last axis by indices of its own shape."""
    x = make.input("x", DType.float32, "batch", 6, 3)
    rows = make.param("rows", DType.int64, 1, 4, 3, values=integers(0, 6))
    cols = make.input("cols", DType.int64, "batch", 6, 2, values=integers(0, 3))
    return [make(Op.GATHER_ELEMENTS, x, rows, axis=1), make(Op.GATHER_ELEMENTS, x, cols, axis=-1)]


register(OpDef(Op.GATHER_ELEMENTS, "take_along_axis: data at per-entry indices on one axis, other axes broadcast",
               2, _type, _impl, attrs=(Attr("axis", "int"),), positions=_positions, example=_example, vjp=_vjp))
