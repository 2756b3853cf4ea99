"""SCATTER: data with whole slices replaced at computed positions (`Y[:, p[t]] ← X[:, t]`).

scatter(data, indices, updates; axis): indices is int64[m] (or int64[b, m], positions per row of a
batched data on a later axis); updates has data's shape with `axis` of size m; the result is data with
slice indices[k] of that axis replaced by slice k of updates (ONNX ScatterElements, the indices spread
over the other axes).
Every index must lie in [0, n) and none may repeat: the interpreter refuses others (numpy would read
a negative one from the end, and let the last of a repeated one win). The frontend also guards them
in the graph, for backends whose scatters do not check (see frontend/expressions/computed_index.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.cotangents import zeros_like
from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import Attr, EvalError, ExampleMaker, IRTypeError, OpDef, axis_of, register
from pseudoformer.ir.types import DType, TensorType


def _type(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    data, idx, upd = src
    ax = axis_of(attrs["axis"], data.rank)
    per_row = idx.rank == 2 and ax > 0 and idx.shape[0] == data.shape[0]
    if idx.dtype is not DType.int64 or not (idx.rank == 1 or per_row):
        raise IRTypeError(f"scatter indices must be int64[m], or int64[{data.shape[0]}, m] on a later axis, got {idx}")
    if upd.dtype is not data.dtype or upd.rank != data.rank:
        raise IRTypeError(f"scatter of {upd} into {data}")
    if upd.shape[ax] != idx.shape[-1] or any(upd.shape[i] != data.shape[i] for i in range(data.rank) if i != ax):
        raise IRTypeError(f"scatter of {upd} into {data} at {idx} on axis {ax}: the shapes do not fit")
    return data


def spread(idx: np.ndarray, rank: int, axis: int) -> list[int]:
    """The shape that puts the positions on `axis` (and per-row ones on axis 0 too), 1 elsewhere."""
    shape = [1] * rank
    shape[axis] = idx.shape[-1]
    if idx.ndim == 2:
        shape[0] = idx.shape[0]
    return shape


def check_positions(op: str, idx: np.ndarray, size: int) -> None:
    """numpy would wrap a negative position and fail on a large one; both are the program's error."""
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        raise EvalError(f"{op} positions from {int(idx.min())} to {int(idx.max())}, out of range for an axis "
                        f"of size {size}")


def _impl(n: Any, a: list[np.ndarray]) -> np.ndarray:
    data, idx, upd = a
    ax = n.attrs["axis"] % data.ndim
    check_positions("scatter", idx, data.shape[ax])
    rows = idx.reshape(-1, idx.shape[-1])
    if any(len(np.unique(r)) != len(r) for r in rows):
        raise EvalError("scatter positions repeat: one entry would be assigned twice")
    out = np.array(data, copy=True)
    every = np.broadcast_to(idx.reshape(spread(idx, data.ndim, ax)), upd.shape)
    np.put_along_axis(out, every, upd, axis=ax)
    return out


def _distinct(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Positions in [0, 4) that do not repeat within a row."""
    return np.stack([rng.permutation(4)[:shape[-1]] for _ in range(int(np.prod(shape[:-1])))]).reshape(shape)


def _example(make: ExampleMaker) -> list[Any]:
    """Rows of x replaced, at the same positions for every batch entry and at positions per entry."""
    x = make.input("x", DType.float32, "batch", 4, "seq")
    at = make.input("at", DType.int64, 2, values=_distinct)
    per_row = make.input("per_row", DType.int64, "batch", 2, values=_distinct)
    upd = make.input("upd", DType.float32, "batch", 2, "seq")
    return [make(Op.SCATTER, x, at, upd, axis=1), make(Op.SCATTER, x, per_row, upd, axis=-2)]


def _vjp(n: Any, ct: Any, make: Any) -> tuple[Any, None, Any]:
    """The replaced slices take nothing from data; updates get their slices of the cotangent back."""
    data, idx, upd = n.src
    if idx.type.rank != 1:
        raise NotImplementedError("the gradient of a scatter with positions per row (no per-row gather yet)")
    axis = n.attrs["axis"]
    return make(Op.SCATTER, ct, idx, zeros_like(make, upd), axis=axis), None, make(Op.GATHER, ct, idx, axis=axis)


# SCATTER_ADD(data, indices, updates; axis) is GATHER's transpose: updates has the shape
# gather(data, indices; axis) has (data.shape[:axis] + indices.shape + data.shape[axis+1:]), and each of
# its slices is added into data at its index, repeated indices accumulating (ONNX ScatterND reduction="add").


def _add_type(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    data, idx, upd = src
    ax = axis_of(attrs["axis"], data.rank)
    want = data.shape[:ax] + idx.shape + data.shape[ax + 1:]
    if idx.dtype is not DType.int64 or upd.dtype is not data.dtype or upd.shape != want:
        raise IRTypeError(f"scatter_add of {upd} into {data} at {idx} on axis {ax}: updates must be "
                          f"{data.dtype.value}[{', '.join(map(str, want))}] and indices int64")
    return data


def _add_impl(n: Any, a: list[np.ndarray]) -> np.ndarray:
    data, idx, upd = a
    ax = n.attrs["axis"] % data.ndim
    check_positions("scatter_add", idx, data.shape[ax])
    out = np.moveaxis(np.array(data, copy=True), ax, 0)
    rows = np.moveaxis(upd, list(range(ax, ax + idx.ndim)), list(range(idx.ndim)))
    np.add.at(out, idx, rows)
    return np.moveaxis(out, 0, ax)


def _add_vjp(n: Any, ct: Any, make: Any) -> tuple[Any, None, Any]:
    return ct, None, make(Op.GATHER, ct, n.src[1], axis=n.attrs["axis"])


def _add_example(make: ExampleMaker) -> list[Any]:
    """Rows 0, 1, 0 of x get three rows added (row 0 twice); then rows 0, 2, 2, 3 by a 2 × 2 table of indices,
    into x and into y, whose axes after the indexed one have known sizes."""
    x = make.input("x", DType.float32, "batch", 4, "seq")
    at = make.input("at", DType.int64, 3, values=lambda rng, shape: np.array([0, 1, 0]))
    table = make.input("table", DType.int64, 2, 2, values=lambda rng, shape: np.array([[0, 2], [2, 3]]))
    upd = make.input("upd", DType.float32, "batch", 3, "seq")
    rows = make.input("rows", DType.float32, "batch", 2, 2, "seq")
    # sizes known after the axis: ONNX adds along the axis with ScatterElements, not ScatterND between transposes
    y = make.input("y", DType.float32, "batch", 4, 3)
    cols = make.input("cols", DType.float32, "batch", 2, 2, 3)
    return [make(Op.SCATTER_ADD, x, at, upd, axis=1), make(Op.SCATTER_ADD, x, table, rows, axis=-2),
            make(Op.SCATTER_ADD, y, table, cols, axis=1)]


register(OpDef(Op.SCATTER, "data with slices at int64 positions replaced by updates' (no repeats)", 3, _type,
               _impl, attrs=(Attr("axis", "int"),), example=_example, vjp=_vjp),
         OpDef(Op.SCATTER_ADD, "data with updates' slices added at int64 positions (repeats accumulate)", 3,
               _add_type, _add_impl, attrs=(Attr("axis", "int"),), example=_add_example, vjp=_add_vjp,
               # accumulating in float16 loses the small terms, and onnxruntime's ScatterND has no float16 add
               precision="anchor"))
