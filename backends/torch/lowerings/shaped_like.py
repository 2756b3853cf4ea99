"""Values shaped like an operand, and a tensor as a matrix → torch (ir/ops/shaped_like.py, ir/ops/flatten.py):

    expand(c, like)              c broadcast to like's shape
    pad(c, like, start; axis)    F.pad(c): start zeros before on axis, size − start − m after
    flatten(x; axis)             x as [∏ shape[:axis], ∏ shape[axis:]]
    reshape_like(y, like)        y.reshape(like's shape)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pseudoformer.backends.torch.dtypes import torch
from pseudoformer.backends.torch.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

if TYPE_CHECKING:
    from pseudoformer.backends.torch.lower import TorchLowering


@lowers(Op.EXPAND)
def _expand(t: TorchLowering, n: Node) -> Any:
    c, like = n.src
    return torch.broadcast_to(t.tensor(c), t.shape(like))


@lowers(Op.PAD)
def _pad(t: TorchLowering, n: Node) -> Any:
    c, like, start = n.src
    rank = like.type.rank
    axis = n.attrs["axis"] % rank
    before = t.value(start) if t.is_scalar(start) else t.tensor(start)
    after = t.size(like, axis) - before - t.size(c, axis)
    return torch.nn.functional.pad(t.tensor(c), [0, 0] * (rank - 1 - axis) + [before, after])


@lowers(Op.FLATTEN)
def _flatten(t: TorchLowering, n: Node) -> Any:
    x, axis = t.tensor(n.src[0]), n.attrs["axis"] % (n.src[0].type.rank + 1)
    rank = n.src[0].type.rank
    if axis == 0:
        return x.reshape(1, -1)
    if axis == rank:
        return x.reshape(-1, 1)
    return x.flatten(0, axis - 1).flatten(1)


@lowers(Op.RESHAPE_LIKE)
def _reshape_like(t: TorchLowering, n: Node) -> Any:
    return t.tensor(n.src[0]).reshape(t.shape(n.src[1]))
