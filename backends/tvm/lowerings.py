"""The TVM backend's lowerings: one Relax expression per IR op (lower.py binds it and checks its shape).

A lowering may accept only some nodes of its op; a node no lowering accepts is decomposed into its
formula before lowering (passes/decompose.py). Attention has no lowering here: its decomposition
(matmul, masks, softmax, matmul) is what the matmul and softmax schedules cover, and the RMS norm
over another axis than the last is its formula too (TVM 0.27's legalization of rms_norm indexes γ
wrongly there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pseudoformer.backends.tvm.guard import require_tvm
from pseudoformer.errors import BackendError
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

if TYPE_CHECKING:
    from pseudoformer.backends.tvm.lower import RelaxLowering

tvm = require_tvm()
from tvm import relax, tirx  # noqa: E402  (after the guard, which explains a missing TVM)
from tvm.relax import op as R  # noqa: E402

LowerFn = Callable[["RelaxLowering", Node], Any]


@dataclass(frozen=True)
class Lowering:
    fn: LowerFn
    when: Callable[[Node], bool] | None = None

    def accepts(self, n: Node) -> bool:
        return self.when is None or self.when(n)


LOWERINGS: dict[Op, Lowering] = {}


def lowers(*ops: Op, when: Callable[[Node], bool] | None = None) -> Callable[[LowerFn], LowerFn]:
    def register(fn: LowerFn) -> LowerFn:
        for op in ops:
            LOWERINGS[op] = Lowering(fn, when)
        return fn
    return register


def accepts(n: Node) -> bool:
    """Whether the TVM backend lowers node n itself (else it lowers n's decomposition)."""
    lowering = LOWERINGS.get(n.op)
    return lowering is not None and lowering.accepts(n)


_UNARY: dict[Op, Callable[[Any], Any]] = {
    Op.NEG: R.negative, Op.EXP: R.exp, Op.LOG: R.log, Op.SQRT: R.sqrt, Op.TANH: R.tanh, Op.ERF: R.erf,
    Op.SIN: R.sin, Op.COS: R.cos, Op.ABS: R.abs, Op.RELU: R.nn.relu, Op.NOT: R.logical_not,
    Op.FLOOR: R.floor, Op.CEIL: R.ceil,
}
_BINARY: dict[Op, Callable[[Any, Any], Any]] = {
    Op.ADD: R.add, Op.SUB: R.subtract, Op.MUL: R.multiply, Op.DIV: R.divide, Op.POW: R.power,
    Op.MOD: R.floor_mod,
    Op.MAX: R.maximum, Op.MIN: R.minimum, Op.LT: R.less, Op.LE: R.less_equal, Op.GT: R.greater,
    Op.GE: R.greater_equal, Op.EQ: R.equal, Op.NE: R.not_equal, Op.AND: R.logical_and,
    Op.OR: R.logical_or, Op.MATMUL: R.matmul,
}
_RELATION = {"<": R.less, "<=": R.less_equal, ">": R.greater, ">=": R.greater_equal, "==": R.equal,
             "!=": R.not_equal}
_REDUCE = {Op.REDUCE_SUM: R.sum, Op.REDUCE_MAX: R.max, Op.REDUCE_MEAN: R.mean}


@lowers(*_UNARY)
def _unary(lw: RelaxLowering, n: Node) -> Any:
    return _UNARY[n.op](lw.tensor(n.src[0]))


@lowers(*_BINARY)
def _binary(lw: RelaxLowering, n: Node) -> Any:
    return _BINARY[n.op](lw.tensor(n.src[0]), lw.tensor(n.src[1]))


@lowers(Op.GELU)
def _gelu(lw: RelaxLowering, n: Node) -> Any:
    x = lw.tensor(n.src[0])
    return R.nn.gelu(x) if n.attrs.get("approximate", "none") == "none" else R.nn.gelu_tanh(x)


@lowers(Op.CAST)
def _cast(lw: RelaxLowering, n: Node) -> Any:
    return R.astype(lw.tensor(n.src[0]), n.dtype.value)


@lowers(Op.WHERE)
def _where(lw: RelaxLowering, n: Node) -> Any:
    return R.where(*(lw.tensor(s) for s in n.src))


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
    return R.concat([lw.tensor(s) for s in n.src], axis=n.attrs["axis"])


@lowers(*_REDUCE)
def _reduce(lw: RelaxLowering, n: Node) -> Any:
    axes = sorted(ax % n.src[0].type.rank for ax in n.attrs["axes"])
    if not axes:  # "reduce nothing" to the IR; Relax would reduce everything
        return R.astype(lw.tensor(n.src[0]), n.dtype.value)
    return _REDUCE[n.op](lw.tensor(n.src[0]), axes, keepdims=bool(n.attrs.get("keepdims", False)))


@lowers(Op.SOFTMAX)
def _softmax(lw: RelaxLowering, n: Node) -> Any:
    return R.nn.softmax(lw.tensor(n.src[0]), axis=n.attrs["axis"])


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


@lowers(Op.DIM)
def _dim(lw: RelaxLowering, n: Node) -> Any:
    # a size Relax cannot see (the operand's shape is not known); known ones are tracked as PrimExprs
    shape = R.shape_to_tensor(R.shape_of(lw.tensor(n.src[0])))
    return R.take(shape, relax.const(n.attrs["axis"] % n.src[0].type.rank, "int64"), axis=0)


@lowers(Op.ARANGE)
def _arange(lw: RelaxLowering, n: Node) -> Any:
    return R.arange(0, lw.size(n.src[0]), 1, "int64")


@lowers(Op.SLICE)
def _slice(lw: RelaxLowering, n: Node) -> Any:
    axis = n.attrs["axis"] % n.src[0].type.rank
    return R.strided_slice(lw.tensor(n.src[0]), [axis], [lw.size(n.src[1])], [lw.size(n.src[2])])


@lowers(Op.INDEX_MASK)
def _index_mask(lw: RelaxLowering, n: Node) -> Any:
    rows, cols = lw.size(n.src[0]), lw.size(n.src[1])
    i = lw.emit(R.expand_dims(R.arange(0, rows, 1, "int64"), [1]))
    j = lw.emit(R.expand_dims(R.arange(0, cols, 1, "int64"), [0]))
    return _RELATION[n.attrs["rel"]](i, j)


@lowers(Op.LAYER_NORM)
def _layer_norm(lw: RelaxLowering, n: Node) -> Any:
    x, g, b = (lw.tensor(s) for s in n.src)
    return R.nn.layer_norm(x, g, b, axes=[n.attrs["axis"] % n.src[0].type.rank], epsilon=float(n.attrs["eps"]))


@lowers(Op.RMS_NORM, when=lambda n: n.attrs["axis"] % n.type.rank == n.type.rank - 1)
def _rms_norm(lw: RelaxLowering, n: Node) -> Any:
    x, g = (lw.tensor(s) for s in n.src)
    return R.nn.rms_norm(x, g, axes=[n.type.rank - 1], epsilon=float(n.attrs["eps"]))
