"""The cotangent of a pick along one axis (TOPK's values, GATHER_ELEMENTS): each output's cotangent goes back to
the entry it read, ct_x[…, j, …] = Σ_m [[idx[…, m, …] = j]] ct[…, m, …], as a one-hot sum over the picks (m)
against the positions (j). Quadratic in the axis, which for routing (k of E) and patches is short."""

from __future__ import annotations

from typing import Any

from pseudoformer.ir.ops.cotangents import unbroadcast
from pseudoformer.ir.ops.op import Op


def scatter_back(make: Any, ct: Any, idx: Any, like: Any, axis: int) -> Any:
    """ct (the picks' cotangent, idx's shape off broadcasting) summed into the shape of `like` along `axis`."""
    rank = like.type.rank
    size = like.shape[axis]
    count = make.const(size, idx.dtype) if isinstance(size, int) else make(Op.DIM, like, axis=axis)
    ids = make(Op.UNSQUEEZE, make(Op.ARANGE, count, dim=size), axes=[a for a in range(rank + 1) if a != axis + 1])
    hit = make(Op.EQ, make(Op.UNSQUEEZE, idx, axes=[axis + 1]), ids)  # [.., m, j, ..]
    spread = make(Op.MUL, make(Op.CAST, hit, dtype=ct.dtype), make(Op.UNSQUEEZE, ct, axes=[axis + 1]))
    back = make(Op.REDUCE_SUM, spread, axes=[axis], keepdims=False)  # [.., j, ..], the broadcast shape
    return unbroadcast(make, back, like)
