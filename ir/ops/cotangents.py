"""What the VJP rules of the ops (the `vjp` of each OpDef) share: cotangents summed down to an operand's
shape where the op broadcast it (jax: a broadcast transposes to a sum), spread back up where the op
reduced (EXPAND), and zeros shaped like a value (EXPAND of a 0).

A rule is `vjp(n, ct, make) → one cotangent per operand` (None where the operand gets none: indices,
masks, sizes), each of exactly its operand's type; `make` is the NodeMaker of passes/autodiff.py.
Rules may build cotangents for operands nothing needs: the autodiff keeps only what a trainable
parameter reads, and the rest is never reachable from the step's outputs.
"""

from __future__ import annotations

from typing import Any

from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import NodeMaker
from pseudoformer.ir.types import DType


def zeros_like(make: NodeMaker, x: Any) -> Any:
    """0 of x's shape and dtype: x is read for its shape only (ir/ops/shaped_like.py)."""
    return make(Op.EXPAND, make.const(0.0, x.dtype), x)


def expand(make: NodeMaker, ct: Any, like: Any) -> Any:
    """ct broadcast up to like's shape."""
    if ct.shape == like.shape:
        return ct
    return make(Op.EXPAND, ct, like)


def unbroadcast(make: NodeMaker, ct: Any, operand: Any) -> Any:
    """ct summed over the axes along which `operand` was broadcast to ct's shape."""
    if ct.shape == operand.shape:
        return ct
    lead = ct.type.rank - operand.type.rank
    if lead:
        ct = make(Op.REDUCE_SUM, ct, axes=list(range(lead)), keepdims=False)
    ones = [i for i, (c, o) in enumerate(zip(ct.shape, operand.shape, strict=True)) if o == 1 and c != 1]
    if ones:
        ct = make(Op.REDUCE_SUM, ct, axes=ones, keepdims=True)
    return ct


def const(make: NodeMaker, value: float, like: Any) -> Any:
    return make.const(float(value), like.dtype)


def size_of(make: NodeMaker, x: Any, axes: list[int], dtype: DType) -> Any:
    """The number of elements of x over `axes`, as a scalar of dtype (read at run time for symbolic dims)."""
    count, dims = 1, []
    for a in axes:
        d = x.shape[a]
        if isinstance(d, int):
            count *= d
        else:
            dims.append(make(Op.CAST, make(Op.DIM, x, axis=a), dtype=dtype))
    total = make.const(float(count), dtype)
    for d in dims:
        total = make(Op.MUL, total, d)
    return total


def binary(rule: Any) -> Any:
    """A rule for a broadcasting binary op from its two unreduced cotangents."""
    def vjp(n: Any, ct: Any, make: NodeMaker) -> tuple[Any, Any]:
        a, b = n.src
        da, db = rule(n, ct, make, a, b)
        return (None if da is None else unbroadcast(make, da, a), None if db is None else unbroadcast(make, db, b))
    return vjp
