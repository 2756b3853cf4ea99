"""Data movement: TRANSPOSE, UNSQUEEZE, SQUEEZE, RESHAPE, CONCAT. They change no values, so under
float16 they keep whatever precision their operand has (precision "follower")."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import Attr, EvalError, ExampleMaker, IRTypeError, OpDef, axis_of, register
from pseudoformer.ir.types import Dim, DType, TensorType


def first_operand(n: Any, dim: str) -> tuple[int, ...]:
    return (0,)


def along_axis(n: Any, dim: str) -> bool:
    """Whether an op with an `axis` attribute works along the run-time dim `dim` of its first operand."""
    axis = n.attrs.get("axis")
    return isinstance(axis, int) and n.src[0].shape[axis] == dim


def _transpose(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    perm = tuple(attrs["perm"])
    if sorted(perm) != list(range(src[0].rank)):
        raise IRTypeError(f"bad permutation {perm} for {src[0]}")
    return TensorType(src[0].dtype, tuple(src[0].shape[p] for p in perm))


def _unsqueeze(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    rank = src[0].rank + len(attrs["axes"])
    dims = list(src[0].shape)
    for ax in sorted(axis_of(a, rank) for a in attrs["axes"]):
        dims.insert(ax, 1)
    return TensorType(src[0].dtype, tuple(dims))


def _squeeze(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    axes = {axis_of(a, src[0].rank) for a in attrs["axes"]}
    if any(src[0].shape[a] != 1 for a in axes):
        raise IRTypeError(f"squeeze of non-unit axes {sorted(axes)} of {src[0]}")
    return TensorType(src[0].dtype, tuple(d for i, d in enumerate(src[0].shape) if i not in axes))


def _reshape(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    return TensorType(src[0].dtype, tuple(attrs["shape"]))


def _reshape_impl(n: Any, a: list[np.ndarray]) -> np.ndarray:
    x, src = a[0], n.src[0].type.shape
    dims: list[int] = []
    for d in n.attrs["shape"]:
        if isinstance(d, str):
            if d not in src:
                raise EvalError(f"reshape dim {d!r} is not a dim of the operand type {n.src[0].type}")
            dims.append(x.shape[src.index(d)])
        else:
            dims.append(int(d))
    return np.reshape(x, dims)


def _reshape_check(n: Any) -> list[str]:
    src, shape = n.src[0].type.shape, tuple(n.attrs["shape"])
    # A symbolic target dim is read off the operand at run time, so it must name one of its dims.
    problems = [f"reshape target dim {d!r} is not a dim of the operand {n.src[0].type}"
                for d in shape if isinstance(d, str) and d not in src]
    concrete = all(isinstance(d, int) for d in (*src, *shape))
    if concrete and math.prod(src) != math.prod(shape):
        problems.append(f"reshape of {n.src[0].type} to {list(shape)} changes the element count")
    return problems


def _reshape_positions(n: Any, dim: str) -> tuple[int, ...] | str:
    if dim in n.src[0].shape and list(n.attrs["shape"]).count(dim) == 1:
        return (0,)
    return "a reshape merges the position axis with another"


def _concat(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    if not src:
        raise IRTypeError("concat of nothing")
    ax = axis_of(attrs["axis"], src[0].rank)
    total: Dim = 0
    for t in src:
        if t.rank != src[0].rank or t.dtype != src[0].dtype:
            raise IRTypeError(f"concat of {t} with {src[0]}")
        if any(t.shape[i] != src[0].shape[i] for i in range(t.rank) if i != ax):
            raise IRTypeError(f"concat on axis {ax}: {t} and {src[0]} differ elsewhere")
        d = t.shape[ax]
        if isinstance(total, int) and isinstance(d, int):
            total += d
        else:  # the first symbolic part starts the sum, so no phantom "0+" prefix
            total = d if total == 0 else f"{total}+{d}"
    return TensorType(src[0].dtype, src[0].shape[:ax] + (total,) + src[0].shape[ax + 1:])


def _concat_positions(n: Any, dim: str) -> tuple[int, ...] | str:
    return f"{n.op.value} along the position axis" if along_axis(n, dim) else tuple(range(len(n.src)))


def _x(make: ExampleMaker) -> Any:
    return make.input("x", DType.float32, "batch", 4, "seq")


def _reshape_example(make: ExampleMaker) -> list[Any]:
    x = _x(make)
    return [make(Op.RESHAPE, x, shape=("batch", 2, 2, "seq")),
            make(Op.RESHAPE, make(Op.TRANSPOSE, x, perm=(0, 2, 1)), shape=("batch", "seq", 2, 2))]


# ---- VJP rules: each movement's transpose is the inverse movement (a concat's, slices of the cotangent).


def _transpose_vjp(n: Any, ct: Any, make: Any) -> tuple[Any]:
    return (make(Op.TRANSPOSE, ct, perm=[int(i) for i in np.argsort(n.attrs["perm"])]),)


def _concat_vjp(n: Any, ct: Any, make: Any) -> tuple[Any, ...]:
    axis, out, start = n.attrs["axis"] % n.type.rank, [], make.const(0, DType.int64)
    for s in n.src:
        size = s.shape[axis]
        stop = make(Op.ADD, start, make.const(size, DType.int64) if isinstance(size, int) else make(Op.DIM, s, axis=axis))
        out.append(make(Op.SLICE, ct, start, stop, axis=axis, dim=size))
        start = stop
    return tuple(out)


register(
    OpDef(Op.TRANSPOSE, "the axes permuted", 1, _transpose, lambda n, a: np.transpose(a[0], tuple(n.attrs["perm"])),
          attrs=(Attr("perm", "ints"),), positions=first_operand, layout="transpose", precision="follower",
          example=lambda make: [make(Op.TRANSPOSE, _x(make), perm=p) for p in ((0, 2, 1), (2, 0, 1))],
          vjp=_transpose_vjp),
    OpDef(Op.UNSQUEEZE, "unit axes inserted (axes in output coordinates)", 1, _unsqueeze,
          lambda n, a: np.expand_dims(a[0], tuple(n.attrs["axes"])),
          attrs=(Attr("axes", "ints"),), positions=first_operand, layout="unsqueeze", precision="follower",
          example=lambda make: [make(Op.UNSQUEEZE, _x(make), axes=a) for a in ((0, 2), (-1,))],
          vjp=lambda n, ct, make: (make(Op.SQUEEZE, ct, axes=list(n.attrs["axes"])),)),
    OpDef(Op.SQUEEZE, "unit axes dropped (axes in input coordinates)", 1, _squeeze,
          lambda n, a: np.squeeze(a[0], axis=tuple(n.attrs["axes"])),
          attrs=(Attr("axes", "ints"),), positions=first_operand, layout="squeeze", precision="follower",
          example=lambda make: [make(Op.SQUEEZE, make.input("u", DType.float32, 1, "batch", 1, "seq"), axes=a)
                                for a in ((0, 2), (-2,))],
          vjp=lambda n, ct, make: (make(Op.UNSQUEEZE, ct, axes=list(n.attrs["axes"])),)),
    OpDef(Op.RESHAPE, "the same elements in another shape (symbolic dims read off the operand)", 1, _reshape,
          _reshape_impl, attrs=(Attr("shape", "dims"),), positions=_reshape_positions, layout="reshape",
          precision="follower", check=_reshape_check, example=_reshape_example,
          vjp=lambda n, ct, make: (make(Op.RESHAPE, ct, shape=list(n.src[0].shape)),)),
    OpDef(Op.CONCAT, "operands joined along an axis", (0, None), _concat,
          lambda n, a: np.concatenate(a, axis=n.attrs["axis"]), attrs=(Attr("axis", "int"),),
          positions=_concat_positions, layout="axis", precision="follower",
          example=lambda make: [make(Op.CONCAT, _x(make), make(Op.NEG, _x(make)), axis=1),
                                make(Op.CONCAT, _x(make), _x(make), axis=-1)], vjp=_concat_vjp),
)
