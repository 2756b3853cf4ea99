"""Data movement → torch: permute, unsqueeze, squeeze, reshape (run-time dims read off the operand), cat,
index_select-like gathers, scatters, slices, and the elements of a tuple."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pseudoformer.backends.torch.dtypes import torch
from pseudoformer.backends.torch.lowerings.registry import lowers
from pseudoformer.base.errors import BackendError
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

if TYPE_CHECKING:
    from pseudoformer.backends.torch.lower import TorchLowering


@lowers(Op.TRANSPOSE)
def _transpose(t: TorchLowering, n: Node) -> Any:
    return t.tensor(n.src[0]).permute(*n.attrs["perm"])


@lowers(Op.UNSQUEEZE)
def _unsqueeze(t: TorchLowering, n: Node) -> Any:
    x = t.tensor(n.src[0])
    for axis in sorted(a % n.type.rank for a in n.attrs["axes"]):
        x = x.unsqueeze(axis)
    return x


@lowers(Op.SQUEEZE)
def _squeeze(t: TorchLowering, n: Node) -> Any:
    rank = n.src[0].type.rank
    return t.tensor(n.src[0]).squeeze(tuple(sorted(a % rank for a in n.attrs["axes"])))


@lowers(Op.RESHAPE)
def _reshape(t: TorchLowering, n: Node) -> Any:
    src = n.src[0].shape
    target = []
    for d in n.attrs["shape"]:
        if isinstance(d, str) and d not in src:  # the verifier rejects such graphs; say so rather than guess
            raise BackendError(f"reshape to {n.type} at {n.span or n.scope or '?'}: "
                               f"dim {d!r} is not a dim of the operand {n.src[0].type}")
        target.append(t.size(n.src[0], src.index(d)) if isinstance(d, str) else int(d))
    return t.tensor(n.src[0]).reshape(target)


@lowers(Op.CONCAT)
def _concat(t: TorchLowering, n: Node) -> Any:
    return torch.cat([t.tensor(s) for s in n.src], dim=n.attrs["axis"] % n.type.rank)


@lowers(Op.GATHER)
def _gather(t: TorchLowering, n: Node) -> Any:
    # numpy's take: every index picks a whole slice along the axis, the indices' axes in its place
    data, idx = n.src
    axis = n.attrs["axis"] % data.type.rank
    at = t.tensor(idx).reshape(-1)
    at = torch.where(at < 0, at + t.size(data, axis), at)  # numpy's take counts a negative index from the end
    rows = torch.index_select(t.tensor(data), axis, at)
    if idx.type.rank == 1:
        return rows
    shape = t.shape(data)
    return rows.reshape([*shape[:axis], *t.shape(idx), *shape[axis + 1:]])


@lowers(Op.GATHER_ELEMENTS)
def _gather_elements(t: TorchLowering, n: Node) -> Any:
    data, idx = n.src  # take_along_dim broadcasts the other axes, as numpy's take_along_axis does
    return torch.take_along_dim(t.tensor(data), t.tensor(idx), dim=n.attrs["axis"] % data.type.rank)


@lowers(Op.SCATTER)
def _scatter(t: TorchLowering, n: Node) -> Any:
    # one position per updated element: the positions (per row, for 2-D indices) spread over the other axes
    data, idx, upd = n.src
    rank = data.type.rank
    axis = n.attrs["axis"] % rank
    shape: list[Any] = [1] * rank
    shape[axis] = -1
    if idx.type.rank == 2:
        shape[0] = t.size(idx, 0)
    every = t.tensor(idx).reshape(shape).expand(t.shape(upd))
    return torch.scatter(t.tensor(data), axis, every, t.tensor(upd))


@lowers(Op.SCATTER_ADD)
def _scatter_add(t: TorchLowering, n: Node) -> Any:
    # index_add along the axis: the updates' index axes merged into one, the indices flattened alike
    data, idx, upd = n.src
    axis = n.attrs["axis"] % data.type.rank
    r = idx.type.rank
    u = t.tensor(upd)
    u = u.unsqueeze(axis) if r == 0 else u.flatten(axis, axis + r - 1) if r > 1 else u
    return torch.index_add(t.tensor(data), axis, t.tensor(idx).reshape(-1), u)


@lowers(Op.SCATTER_ADD_ELEMENTS)
def _scatter_add_elements(t: TorchLowering, n: Node) -> Any:
    data, idx, upd = (t.tensor(s) for s in n.src)
    return torch.scatter_add(data, n.attrs["axis"] % n.type.rank, idx, upd)


@lowers(Op.SLICE)
def _slice(t: TorchLowering, n: Node) -> Any:
    x, start, stop = n.src
    if not (t.is_scalar(start) and t.is_scalar(stop)):
        raise BackendError(f"a slice whose bounds are computed from tensor data (at {n.span or n.scope or '?'})")
    axis = n.attrs["axis"] % x.type.rank
    return t.tensor(x)[(slice(None),) * axis + (slice(t.value(start), t.value(stop)),)]


@lowers(Op.GET)
def _get(t: TorchLowering, n: Node) -> Any:
    return t.value(n.src[0])[n.attrs["index"]]
