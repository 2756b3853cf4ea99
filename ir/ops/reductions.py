"""Reductions over axes (sum, max, mean), the running sum along an axis (CUMSUM: a prefix sum Σ_{u=1}^{t}),
and the softmax. Long sums and exponentials lose too much in
float16, so under a float16 lowering these compute in float32 (precision "anchor")."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.cotangents import expand, size_of
from pseudoformer.ir.ops.movement import along_axis
from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import Attr, ExampleMaker, IRTypeError, NodeMaker, OpDef, axis_of, register
from pseudoformer.ir.types import DType, TensorType


def _reduce_type(src: Sequence[TensorType], attrs: Mapping[str, Any], op: Op) -> TensorType:
    if op is not Op.REDUCE_MAX and src[0].dtype is DType.bool:
        raise IRTypeError(f"{op.value} of bool {src[0]}: cast to a number first")
    axes = {axis_of(a, src[0].rank) for a in attrs["axes"]}
    keep = attrs.get("keepdims", False)
    dims = tuple(1 if i in axes else d for i, d in enumerate(src[0].shape) if keep or i not in axes)
    return TensorType(src[0].dtype, dims)


def reduced_axes(n: Any) -> list[int]:
    """The operand axes a reduction removes (or keeps as unit axes), sorted and non-negative."""
    return sorted({a % n.src[0].type.rank for a in n.attrs["axes"]})


def _reduce_positions(n: Any, dim: str) -> tuple[int, ...] | str:
    return "a reduction over positions" if n.src[0].shape.index(dim) in reduced_axes(n) else (0,)


def _kept(n: Any, ct: Any, make: Any) -> Any:
    """ct with the reduced axes back as unit axes."""
    return ct if n.attrs.get("keepdims", False) else make(Op.UNSQUEEZE, ct, axes=reduced_axes(n))


def _sum_vjp(n: Any, ct: Any, make: Any) -> tuple[Any]:
    return (expand(make, _kept(n, ct, make), n.src[0]),)


def _mean_vjp(n: Any, ct: Any, make: Any) -> tuple[Any]:
    count = size_of(make, n.src[0], reduced_axes(n), ct.dtype)
    return (expand(make, make(Op.DIV, _kept(n, ct, make), count), n.src[0]),)


def _max_vjp(n: Any, ct: Any, make: Any) -> tuple[Any]:
    """The cotangent shared evenly by the elements equal to the max (torch's amax does the same)."""
    x = n.src[0]
    hit = make(Op.CAST, make(Op.EQ, x, _kept(n, n, make)), dtype=x.dtype)
    ties = make(Op.REDUCE_SUM, hit, axes=reduced_axes(n), keepdims=True)
    return (make(Op.MUL, hit, make(Op.DIV, _kept(n, ct, make), ties)),)


def _softmax_vjp(n: Any, ct: Any, make: Any) -> tuple[Any]:
    """y ⊙ (ct − Σ ct ⊙ y): the Jacobian diag(y) − y yᵀ applied, never formed."""
    dot = make(Op.REDUCE_SUM, make(Op.MUL, ct, n), axes=[n.attrs["axis"]], keepdims=True)
    return (make(Op.MUL, n, make(Op.SUB, ct, dot)),)


_VJPS = {Op.REDUCE_SUM: _sum_vjp, Op.REDUCE_MEAN: _mean_vjp, Op.REDUCE_MAX: _max_vjp}


def reduction(op: Op, doc: str, fn: Callable[..., Any]) -> OpDef:
    def impl(n: Any, a: list[np.ndarray]) -> Any:
        # numpy's mean of ints is float64; the IR keeps the operand's dtype.
        out = fn(a[0], axis=tuple(n.attrs["axes"]), keepdims=bool(n.attrs.get("keepdims", False)))
        return np.asarray(out).astype(a[0].dtype, copy=False)

    return OpDef(op, doc, 1, lambda src, attrs: _reduce_type(src, attrs, op), impl,
                 attrs=(Attr("axes", "ints"), Attr("keepdims", "bool", False)), reduces=reduced_axes,
                 positions=_reduce_positions, layout="reduce", precision="anchor", example=_reduce_example(op),
                 vjp=_VJPS[op])


def _reduce_example(op: Op) -> Callable[[ExampleMaker], list[Any]]:
    """Over one axis kept, over all, over a negative axis, and over none (which only casts)."""
    def example(make: ExampleMaker) -> list[Any]:
        x = make.input("x", DType.float32, "batch", 4, "seq")
        return [make(op, x, axes=axes, keepdims=keep)
                for axes, keep in (((1,), True), ((0, 1, 2), False), ((-1,), False), ((), False))]

    return example


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    # Subtracting the max keeps exp in range; an all -inf row gives NaN, as it does in numpy and
    # torch, and is left visible on purpose.
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _softmax_type(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    axis_of(attrs["axis"], src[0].rank)
    return src[0]


def along_positions(n: Any, dim: str) -> tuple[int, ...] | str:
    """The position rule of an op over one axis: position-wise unless that axis is the positions."""
    return f"{n.op.value} along the position axis" if along_axis(n, dim) else (0,)


def _cumsum(n: Any, a: list[np.ndarray]) -> np.ndarray:
    return np.cumsum(a[0], axis=n.attrs["axis"]).astype(a[0].dtype, copy=False)


def _cumsum_formula(n: Any, make: NodeMaker) -> Any:
    """x · U along the axis, U[i, j] = [[i ≤ j]]: quadratic in the axis, for a backend without a running sum
    (TVM 0.27 has no legalisation of relax.cumsum)."""
    x = n.src[0]
    rank = x.type.rank
    axis = n.attrs["axis"] % rank
    size = x.type.shape[axis]
    count = make(Op.DIM, x, axis=axis)
    upper = make(Op.CAST, make(Op.INDEX_MASK, count, count, rel="<=", dims=[size, size]), dtype=x.type.dtype)
    if axis == rank - 1:
        return make(Op.MATMUL, x, upper)
    perm = [k for k in range(rank) if k != axis] + [axis]
    back = sorted(range(rank), key=lambda k: perm[k])
    return make(Op.TRANSPOSE, make(Op.MATMUL, make(Op.TRANSPOSE, x, perm=perm), upper), perm=back)


register(
    reduction(Op.REDUCE_SUM, "Σ over axes", np.sum),
    OpDef(Op.CUMSUM, "the running sum x₁ + … + x_t along an axis (inclusive)", 1, _softmax_type, _cumsum,
          attrs=(Attr("axis", "int"),), positions=along_positions, layout="axis", precision="anchor",
          decompose=_cumsum_formula,
          example=lambda make: [make(Op.CUMSUM, make.input("x", DType.float32, "batch", 4, "seq"), axis=a)
                                for a in (2, -2, 0)]),
    reduction(Op.REDUCE_MAX, "max over axes", np.max),
    reduction(Op.REDUCE_MEAN, "mean over axes", np.mean),
    OpDef(Op.SOFTMAX, "exp(x) / Σ exp(x) along an axis", 1, _softmax_type, lambda n, a: softmax(a[0], n.attrs["axis"]),
          attrs=(Attr("axis", "int"),), positions=along_positions, layout="normalise", precision="anchor",
          example=lambda make: [make(Op.SOFTMAX, make.input("x", DType.float32, "batch", 4, "seq"), axis=a)
                                for a in (1, -1)], vjp=_softmax_vjp),
)
