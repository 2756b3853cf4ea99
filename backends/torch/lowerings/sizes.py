"""Run-time sizes → torch: an axis's size (an int where the IR knows it, else read off the value), ranges,
index masks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pseudoformer.backends.torch.dtypes import torch
from pseudoformer.backends.torch.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

if TYPE_CHECKING:
    from pseudoformer.backends.torch.lower import TorchLowering

_RELATION = {"<": torch.lt, "<=": torch.le, ">": torch.gt, ">=": torch.ge, "==": torch.eq, "!=": torch.ne}


@lowers(Op.DIM)
def _dim(t: TorchLowering, n: Node) -> Any:
    t.scalars.add(id(n))  # a size, which slices and reshapes take as it is
    return t.size(n.src[0], n.attrs["axis"])


def arange(t: TorchLowering, size: Node) -> Any:
    v = t.value(size) if t.is_scalar(size) else t.tensor(size)
    if isinstance(v, int):
        return t.constant(torch.arange(v))
    return t.call(torch.arange, v, dtype=torch.int64, device=t.device)


@lowers(Op.ARANGE)
def _arange(t: TorchLowering, n: Node) -> Any:
    return arange(t, n.src[0])


@lowers(Op.INDEX_MASK)
def _index_mask(t: TorchLowering, n: Node) -> Any:
    rows = arange(t, n.src[0]).unsqueeze(1)
    return _RELATION[n.attrs["rel"]](rows, arange(t, n.src[1]))
