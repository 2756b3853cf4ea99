"""Sizes and index sets known only at run time: an axis's size, a range, a slice, a comparison mask."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.elementwise import COMPARE_FNS, RELATIONS
from pseudoformer.ir.ops.movement import first_operand
from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.reductions import along_positions
from pseudoformer.ir.ops.registry import Attr, ExampleMaker, IRTypeError, OpDef, axis_of, register, scalar_int
from pseudoformer.ir.types import DType, TensorType

INT = TensorType(DType.int64, ())


def _dim(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    axis_of(attrs["axis"], src[0].rank)
    return INT


def _arange(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    scalar_int(src[0], "arange's bound")
    return TensorType(DType.int64, (attrs["dim"],))


def _slice(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    scalar_int(src[1], "slice start")
    scalar_int(src[2], "slice stop")
    ax = axis_of(attrs["axis"], src[0].rank)
    return TensorType(src[0].dtype, src[0].shape[:ax] + (attrs["dim"],) + src[0].shape[ax + 1:])


def _slice_impl(n: Any, a: list[np.ndarray]) -> np.ndarray:
    x, start, stop = a
    index: list[slice] = [slice(None)] * x.ndim
    index[n.attrs["axis"]] = slice(int(start), int(stop))
    return x[tuple(index)]


def _slice_vjp(n: Any, ct: Any, make: Any) -> tuple[Any, None, None]:
    """A slice transposes to a pad: its cotangent put back at positions start … stop − 1 of zeros."""
    x, start = n.src[:2]
    axis = n.attrs["axis"] % x.type.rank
    first = start
    if start.op is not Op.CONST or int(start.attrs["value"]) < 0:  # a start counted from the end
        size = x.shape[axis]
        count = make.const(size, DType.int64) if isinstance(size, int) else make(Op.DIM, x, axis=axis)
        first = make(Op.WHERE, make(Op.LT, start, make.const(0, DType.int64)), make(Op.ADD, start, count), start)
    return make(Op.PAD, ct, x, first, axis=axis), None, None


def _index_mask(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    scalar_int(src[0], "mask rows")
    scalar_int(src[1], "mask cols")
    if attrs["rel"] not in RELATIONS:
        raise IRTypeError(f"unknown relation {attrs['rel']!r}")
    return TensorType(DType.bool, tuple(attrs["dims"]))


def _index_mask_impl(n: Any, a: list[np.ndarray]) -> np.ndarray:
    i = np.arange(int(a[0]), dtype=np.int64)[:, None]
    j = np.arange(int(a[1]), dtype=np.int64)[None, :]
    return COMPARE_FNS[RELATIONS[n.attrs["rel"]]](i, j)


def _index_mask_check(n: Any) -> list[str]:
    return [] if len(n.attrs["dims"]) == 2 else [f"index_mask dims {n.attrs['dims']!r} must name two dims"]


def _x(make: ExampleMaker) -> Any:
    return make.input("x", DType.float32, "batch", 4, "seq")


def _slice_example(make: ExampleMaker) -> list[Any]:
    """All positions but the first (bounds known at run time only), and the first two rows."""
    x, seq = _x(make), make(Op.DIM, _x(make), axis=-1)
    one, two = make.const(1, DType.int64), make.const(2, DType.int64)
    return [make(Op.SLICE, x, one, seq, axis=2, dim="seq-1"),
            make(Op.SLICE, x, make.const(0, DType.int64), two, axis=-2, dim=2)]


def _index_mask_example(make: ExampleMaker) -> list[Any]:
    seq = make(Op.DIM, _x(make), axis=-1)
    wider = make(Op.ADD, seq, make.const(1, DType.int64))
    return [make(Op.INDEX_MASK, seq, wider, rel=rel, dims=("seq", "seq+1")) for rel in RELATIONS]


register(
    OpDef(Op.DIM, "the run-time size of an axis, an int64 scalar", 1, _dim,
          lambda n, a: np.array(a[0].shape[n.attrs["axis"]], dtype=np.int64), attrs=(Attr("axis", "int"),),
          positions=first_operand, layout="size",
          example=lambda make: [make(Op.DIM, _x(make), axis=a) for a in (-1, 0, 1)]),
    OpDef(Op.ARANGE, "0, 1, …, n − 1 as int64[dim]", 1, _arange, lambda n, a: np.arange(int(a[0]), dtype=np.int64),
          attrs=(Attr("dim", "dim"),),
          example=lambda make: [make(Op.ARANGE, make(Op.DIM, _x(make), axis=2), dim="seq"),
                                make(Op.ARANGE, make.const(3, DType.int64), dim=3)]),
    OpDef(Op.SLICE, "x[start:stop] along an axis, of run-time size dim", 3, _slice, _slice_impl,
          attrs=(Attr("axis", "int"), Attr("dim", "dim")), positions=along_positions, layout="axis",
          precision="follower", example=_slice_example, vjp=_slice_vjp),
    OpDef(Op.INDEX_MASK, "bool[rows, cols] holding i rel j", 2, _index_mask, _index_mask_impl,
          attrs=(Attr("rel", "str", choices=tuple(RELATIONS)), Attr("dims", "dims")), layout="index_mask",
          check=_index_mask_check, example=_index_mask_example),
)
