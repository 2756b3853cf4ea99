"""Norms → torch.nn.functional.layer_norm and rms_norm, over the last axis (another axis is moved there and
back)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pseudoformer.backends.torch.dtypes import torch
from pseudoformer.backends.torch.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

if TYPE_CHECKING:
    from pseudoformer.backends.torch.lower import TorchLowering

F = torch.nn.functional


def _over_last(t: TorchLowering, n: Node, norm: Any) -> Any:
    x = t.tensor(n.src[0])
    rank = n.type.rank
    axis = n.attrs["axis"] % rank
    if axis == rank - 1:
        return norm(x)
    return norm(x.movedim(axis, -1)).movedim(-1, axis)


@lowers(Op.LAYER_NORM)
def _layer_norm(t: TorchLowering, n: Node) -> Any:
    _, g, b = n.src
    width = n.src[0].type.shape[n.attrs["axis"]]
    return _over_last(t, n, lambda x: F.layer_norm(x, [width], t.tensor(g), t.tensor(b), eps=float(n.attrs["eps"])))


@lowers(Op.RMS_NORM)
def _rms_norm(t: TorchLowering, n: Node) -> Any:
    width = n.src[0].type.shape[n.attrs["axis"]]
    return _over_last(t, n, lambda x: F.rms_norm(x, [width], t.tensor(n.src[1]), eps=float(n.attrs["eps"])))
