"""SCATTER_ADD_ELEMENTS: GATHER_ELEMENTS' transpose (jax: a gather transposes to a scatter-add).

    scatter_add_elements(data, idx, upd; axis)[…, idx[…, m, …], …] += upd[…, m, …]

idx and upd have one shape, of data's rank, and data's sizes off the axis; each update is added into data at its
index along the axis, repeated indices accumulating (numpy's add.at; ONNX ScatterElements with reduction="add";
relax scatter_elements with reduction "add"). The cotangent of a per-position pick (the training loss's
`log P[x[t+1], t]`, picked with gather_elements) is this op into zeros: one pass over the updates, where a one-hot
sum over the indexed axis builds updates × axis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import (
    Attr,
    ExampleMaker,
    IRTypeError,
    OpDef,
    axis_of,
    integers,
    register,
)
from pseudoformer.ir.ops.scatter import check_positions
from pseudoformer.ir.types import DType, TensorType


def _type(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    data, idx, upd = src
    ax = axis_of(attrs["axis"], data.rank)
    fits = idx.rank == data.rank and all(idx.shape[k] == data.shape[k] for k in range(data.rank) if k != ax)
    if idx.dtype is not DType.int64 or upd.dtype is not data.dtype or upd.shape != idx.shape or not fits:
        raise IRTypeError(f"scatter_add_elements of {upd} into {data} at {idx} on axis {ax}: indices int64 and "
                          "updates of one shape, the data's off the axis")
    return data


def _impl(n: Any, a: list[np.ndarray]) -> np.ndarray:
    data, idx, upd = a
    ax = n.attrs["axis"] % data.ndim
    check_positions("scatter_add_elements", idx, data.shape[ax])
    out = np.array(data, copy=True)
    at = list(np.indices(idx.shape, sparse=True))
    at[ax] = idx
    np.add.at(out, tuple(at), upd)
    return out


def _vjp(n: Any, ct: Any, make: Any) -> tuple[Any, None, Any]:
    """data's cotangent passes through; each update's is the cotangent at the entry it was added to."""
    return ct, None, make(Op.GATHER_ELEMENTS, ct, n.src[1], axis=n.attrs["axis"])


def _example(make: ExampleMaker) -> list[Any]:
    """Three rows of updates added into x [batch, 4, 3] at rows per entry (repeats accumulate), and two columns
    added along the last axis."""
    x = make.input("x", DType.float32, "batch", 4, 3)
    rows = make.input("rows", DType.int64, "batch", 3, 3, values=integers(0, 4))
    upd = make.input("upd", DType.float32, "batch", 3, 3)
    cols = make.input("cols", DType.int64, "batch", 4, 2, values=integers(0, 3))
    more = make.input("more", DType.float32, "batch", 4, 2)
    return [make(Op.SCATTER_ADD_ELEMENTS, x, rows, upd, axis=1),
            make(Op.SCATTER_ADD_ELEMENTS, x, cols, more, axis=-1)]


register(OpDef(Op.SCATTER_ADD_ELEMENTS, "data with per-entry updates added at int64 positions on one axis "
               "(repeats accumulate)", 3, _type, _impl, attrs=(Attr("axis", "int"),), example=_example, vjp=_vjp,
               # as SCATTER_ADD: accumulating in float16 loses the small terms
               precision="anchor"))
