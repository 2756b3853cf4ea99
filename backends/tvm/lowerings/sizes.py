"""Run-time sizes and index sets → Relax: dim, arange, index masks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pseudoformer.backends.tvm.lowerings.registry import R, lowers, relax
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

if TYPE_CHECKING:
    from pseudoformer.backends.tvm.lower import RelaxLowering

_RELATION = {"<": R.less, "<=": R.less_equal, ">": R.greater, ">=": R.greater_equal, "==": R.equal,
             "!=": R.not_equal}


@lowers(Op.DIM)
def _dim(lw: RelaxLowering, n: Node) -> Any:
    # a size Relax cannot see (the operand's shape is not known); known ones are tracked as PrimExprs
    shape = R.shape_to_tensor(R.shape_of(lw.tensor(n.src[0])))
    return R.take(shape, relax.const(n.attrs["axis"] % n.src[0].type.rank, "int64"), axis=0)


@lowers(Op.ARANGE)
def _arange(lw: RelaxLowering, n: Node) -> Any:
    return R.arange(0, lw.size(n.src[0]), 1, "int64")


@lowers(Op.INDEX_MASK)
def _index_mask(lw: RelaxLowering, n: Node) -> Any:
    rows, cols = lw.size(n.src[0]), lw.size(n.src[1])
    i = lw.emit(R.expand_dims(R.arange(0, rows, 1, "int64"), [1]))
    j = lw.emit(R.expand_dims(R.arange(0, cols, 1, "int64"), [0]))
    return _RELATION[n.attrs["rel"]](i, j)
