"""Reductions, running sums, softmax and top-k → torch.sum/amax/mean, cumsum, softmax, log_softmax, sort."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pseudoformer.backends.torch.dtypes import TORCH_DTYPE, torch
from pseudoformer.backends.torch.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

if TYPE_CHECKING:
    from pseudoformer.backends.torch.lower import TorchLowering

_REDUCE = {Op.REDUCE_SUM: torch.sum, Op.REDUCE_MAX: torch.amax, Op.REDUCE_MEAN: torch.mean}


@lowers(*_REDUCE)
def _reduce(t: TorchLowering, n: Node) -> Any:
    x = t.tensor(n.src[0])
    axes = sorted(ax % n.src[0].type.rank for ax in n.attrs["axes"])
    if not axes:  # "reduce nothing" to the IR, but "reduce everything" to torch
        return x
    out = _REDUCE[n.op](x, dim=axes, keepdim=bool(n.attrs.get("keepdims", False)))
    return out.to(TORCH_DTYPE[n.dtype]) if n.op is Op.REDUCE_SUM else out  # an int sum stays the operand's dtype


@lowers(Op.SOFTMAX)
def _softmax(t: TorchLowering, n: Node) -> Any:
    return torch.softmax(t.tensor(n.src[0]), dim=n.attrs["axis"] % n.type.rank)


@lowers(Op.LOG_SOFTMAX)
def _log_softmax(t: TorchLowering, n: Node) -> Any:
    return torch.log_softmax(t.tensor(n.src[0]), dim=n.attrs["axis"] % n.type.rank)


@lowers(Op.CUMSUM)
def _cumsum(t: TorchLowering, n: Node) -> Any:
    return torch.cumsum(t.tensor(n.src[0]), dim=n.attrs["axis"] % n.type.rank, dtype=TORCH_DTYPE[n.dtype])


@lowers(Op.TOPK)
def _topk(t: TorchLowering, n: Node) -> Any:
    # a stable sort, largest first: equal values in index order, as the IR's reference orders them
    # (torch.topk does not promise an order among ties)
    axis = n.attrs["axis"] % n.src[0].type.rank
    values, positions = torch.sort(t.tensor(n.src[0]), dim=axis, descending=True, stable=True)
    out = positions if n.attrs["result"] == "indices" else values
    return out.narrow(axis, 0, int(n.attrs["k"]))
