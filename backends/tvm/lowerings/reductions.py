"""Reductions → Relax: sum, max, mean over axes, and softmax."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pseudoformer.backends.tvm.lowerings.registry import R, lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

if TYPE_CHECKING:
    from pseudoformer.backends.tvm.lower import RelaxLowering

_REDUCE = {Op.REDUCE_SUM: R.sum, Op.REDUCE_MAX: R.max, Op.REDUCE_MEAN: R.mean}


@lowers(*_REDUCE)
def _reduce(lw: RelaxLowering, n: Node) -> Any:
    axes = sorted(ax % n.src[0].type.rank for ax in n.attrs["axes"])
    if not axes:  # "reduce nothing" to the IR; Relax would reduce everything
        return R.astype(lw.tensor(n.src[0]), n.dtype.value)
    return _REDUCE[n.op](lw.tensor(n.src[0]), axes, keepdims=bool(n.attrs.get("keepdims", False)))


@lowers(Op.SOFTMAX)
def _softmax(lw: RelaxLowering, n: Node) -> Any:
    return R.nn.softmax(lw.tensor(n.src[0]), axis=n.attrs["axis"])


@lowers(Op.LOG_SOFTMAX)
def _log_softmax(lw: RelaxLowering, n: Node) -> Any:
    return R.nn.log_softmax(lw.tensor(n.src[0]), axis=n.attrs["axis"])
