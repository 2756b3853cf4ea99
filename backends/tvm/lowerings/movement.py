"""Data movement → Relax: transpose, (un)squeeze, reshape, concat, slice, and gather and scatter with the
checks of their indices."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pseudoformer.backends.tvm.concat_kernel import concat2_func
from pseudoformer.backends.tvm.fusion import OPAQUE  # fusion leaves our kernels whole
from pseudoformer.backends.tvm.lowerings.registry import R, lowers, relax, tirx
from pseudoformer.base.errors import BackendError
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op
from pseudoformer.ir.types import DType

if TYPE_CHECKING:
    from pseudoformer.backends.tvm.lower import RelaxLowering


@lowers(Op.TRANSPOSE)
def _transpose(lw: RelaxLowering, n: Node) -> Any:
    return R.permute_dims(lw.tensor(n.src[0]), list(n.attrs["perm"]))


@lowers(Op.UNSQUEEZE)
def _unsqueeze(lw: RelaxLowering, n: Node) -> Any:
    return R.expand_dims(lw.tensor(n.src[0]), sorted(n.attrs["axes"]))


@lowers(Op.SQUEEZE)
def _squeeze(lw: RelaxLowering, n: Node) -> Any:
    return R.squeeze(lw.tensor(n.src[0]), sorted(n.attrs["axes"]))


@lowers(Op.RESHAPE)
def _reshape(lw: RelaxLowering, n: Node) -> Any:
    src_dims = n.src[0].shape
    x = lw.tensor(n.src[0])
    have = lw.shape(x)
    target = []
    for d in n.attrs["shape"]:
        if isinstance(d, str):
            if d not in src_dims:  # the verifier rejects such graphs; say so rather than guess
                raise BackendError(f"reshape to {n.type} at {n.span or n.scope or '?'}: "
                                   f"dim {d!r} is not a dim of the operand {n.src[0].type}")
            target.append(have[src_dims.index(d)])
        else:
            target.append(tirx.IntImm("int64", d))
    return R.reshape(x, target)


@lowers(Op.CONCAT)
def _concat(lw: RelaxLowering, n: Node) -> Any:
    parts = [lw.tensor(s) for s in n.src]
    axis = n.attrs["axis"] % n.type.rank
    if lw.target_kind != "llvm" or len(parts) != 2 or n.dtype is DType.bool:
        return R.concat(parts, axis=axis)
    # on a CPU, two row copies (concat_kernel.py)
    key = ("concat2", n.dtype.value, n.type.rank, axis)
    if key not in lw.notes:
        func = concat2_func(n.dtype.value, n.type.rank, axis).with_attr("op_pattern", OPAQUE)
        lw.notes[key] = lw.bb.add_func(func, f"concat2_{n.dtype.value}")
    a, b = (lw.shape(p) for p in parts)
    return R.call_tir(lw.notes[key], parts,
                      relax.TensorType([*a[:axis], a[axis] + b[axis], *a[axis + 1:]], n.dtype.value))


@lowers(Op.SLICE)
def _slice(lw: RelaxLowering, n: Node) -> Any:
    axis = n.attrs["axis"] % n.src[0].type.rank
    x = lw.tensor(n.src[0])
    size = lw.shape(x)[axis]

    def bound(i: Any, low: Any) -> Any:  # Python's slice bounds: from the end if negative, then clamped
        zero = tirx.IntImm("int64", 0)
        return tirx.max(tirx.min(tirx.Select(i < zero, i + size, i), size), low)

    # Our own bounds with Select, not strided_slice's: its shape for bounds it cannot prove in range holds
    # an if_then_else call, and FuseOps in TVM 0.27 fails on a fused function whose shapes carry one
    # (no FInferType for prim.if_then_else), as a training step's pad of a slice's cotangent made it do.
    begin = lw.analyzer.simplify(bound(lw.size(n.src[1]), tirx.IntImm("int64", 0)))
    end = lw.analyzer.simplify(bound(lw.size(n.src[2]), begin))
    return R.strided_slice(x, [axis], [begin], [end], assume_inbound=True)


@lowers(Op.GATHER)
def _gather(lw: RelaxLowering, n: Node) -> Any:
    axis = n.attrs["axis"] % n.src[0].type.rank
    if n.src[1].op is not Op.INPUT:  # an input's indices are checked before the run (build.py)
        _check_indices(lw, n, axis)
    # "wrap" is numpy.take for every valid index, negative ones included, and never reads
    # outside the table even if an invalid one got past the checks ("fast" would crash).
    return R.take(lw.tensor(n.src[0]), lw.tensor(n.src[1]), axis=axis, mode="wrap")


@lowers(Op.SCATTER)
def _scatter(lw: RelaxLowering, n: Node) -> Any:
    axis = n.attrs["axis"] % n.src[0].type.rank
    _check_indices(lw, n, axis)  # scatter_elements, like take, would not stop at an index out of range
    upd = lw.tensor(n.src[2])
    idx = lw.tensor(n.src[1])
    shape: list[Any] = [1] * n.src[0].type.rank
    shape[axis] = -1
    if n.src[1].type.rank == 2:  # positions per row
        shape[0] = lw.shape(idx)[0]
    column = lw.emit(R.reshape(idx, shape))
    every = lw.emit(R.broadcast_to(column, relax.ShapeExpr(lw.shape(upd))))
    return R.scatter_elements(lw.tensor(n.src[0]), every, upd, axis=axis)


@lowers(Op.SCATTER_ADD)
def _scatter_add(lw: RelaxLowering, n: Node) -> Any:
    # As in ONNX (backends/onnx/lowerings/movement.py): scatter_nd along leading axes, summing repeats.
    data, idx, upd = n.src
    rank, r = data.type.rank, idx.type.rank
    axis = n.attrs["axis"] % rank
    _check_indices(lw, n, axis)
    to_front = [axis, *(i for i in range(rank) if i != axis)]
    front = lw.emit(R.permute_dims(lw.tensor(data), to_front)) if axis else lw.tensor(data)
    rows = lw.tensor(upd)
    if axis:
        rows = lw.emit(R.permute_dims(rows, [*range(axis, axis + r), *range(axis), *range(axis + r, upd.type.rank)]))
    at = lw.emit(R.expand_dims(lw.tensor(idx), r))
    summed = R.scatter_nd(front, at, rows, reduction="add")
    return R.permute_dims(lw.emit(summed), [to_front.index(i) for i in range(rank)]) if axis else summed


@lowers(Op.SCATTER_ADD_ELEMENTS)
def _scatter_add_elements(lw: RelaxLowering, n: Node) -> Any:
    # As in ONNX: scatter_elements adding each update at its index (repeats accumulate), indices checked first.
    axis = n.attrs["axis"] % n.type.rank
    _check_indices(lw, n, axis)
    data, idx, upd = (lw.tensor(s) for s in n.src)
    return R.scatter_elements(data, idx, upd, axis=axis, reduction="add")


def _check_indices(lw: RelaxLowering, n: Node, axis: int) -> None:
    """Gather (or scatter) indices computed in the graph: an error at run time unless all are in [-size, size).

    The interpreter raises numpy's IndexError there and ONNX Runtime its Gather error; the
    message names the op, its source line and the indices' range. Two int64 reductions over the
    indices (token ids, positions: a few thousand at most) and an assert the VM runs on the host.
    """
    idx = lw.tensor(n.src[1])
    size = lw.shape(lw.tensor(n.src[0]))[axis]
    bound = (relax.const(int(size), "int64") if isinstance(size, tirx.IntImm)
             else lw.emit(R.reshape(R.shape_to_tensor(relax.ShapeExpr([size])), ())))
    axes = list(range(n.src[1].type.rank))
    lo = lw.emit(R.min(idx, axes) if axes else idx)
    hi = lw.emit(R.max(idx, axes) if axes else idx)
    inside = R.logical_and(R.greater_equal(lo, R.negative(bound)), R.less(hi, bound))
    ok = lw.emit(R.logical_or(inside, R.greater(lo, hi)))  # min > max: no indices at all
    where = f"{n.op.value} at {n.span or n.scope or f'%{lw.index}'}"
    lw.bb.emit(R.assert_op(ok, [lo, hi, bound],
                           f"{where}: indices from {{}} to {{}}, out of range for an axis of size {{}}"))


@lowers(Op.GATHER_ELEMENTS)
def _gather_elements(lw: RelaxLowering, n: Node) -> Any:
    """relax gather_elements after both operands are broadcast to the output's shape off the axis; its indices
    are checked first, as a gather's are (gather_elements would read outside the axis)."""
    axis = n.attrs["axis"] % n.src[0].type.rank
    _check_indices(lw, n, axis)
    data, idx = lw.tensor(n.src[0]), lw.tensor(n.src[1])
    d_shape, i_shape = lw.shape(data), lw.shape(idx)
    full = [d_shape[k] if n.src[0].shape[k] == n.shape[k] else i_shape[k] for k in range(n.src[0].type.rank)]
    for k, (op, shape) in enumerate(((n.src[0], d_shape), (n.src[1], i_shape))):
        if any(op.shape[a] != n.shape[a] for a in range(len(full)) if a != axis):
            want = [*full[:axis], shape[axis], *full[axis + 1:]]
            if k == 0:
                data = lw.emit(R.broadcast_to(data, relax.ShapeExpr(want)))
            else:
                idx = lw.emit(R.broadcast_to(idx, relax.ShapeExpr(want)))
    return R.gather_elements(data, idx, axis=axis)
