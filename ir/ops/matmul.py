"""MATMUL: numpy's matmul of two tensors of rank ≥ 2, batch dims broadcast."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.cotangents import unbroadcast
from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import ExampleMaker, IRTypeError, OpDef, register
from pseudoformer.ir.types import DType, TensorType, broadcast_shapes


def _type(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    a, b = src
    if a.rank < 2 or b.rank < 2:
        raise IRTypeError(f"matmul needs rank >= 2 operands, got {a} and {b}")
    if a.dtype != b.dtype:
        raise IRTypeError(f"matmul on mixed dtypes {a} and {b}")
    if a.shape[-1] != b.shape[-2]:
        raise IRTypeError(f"matmul inner dims differ: {a} @ {b}")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if batch is None:
        raise IRTypeError(f"matmul batch dims do not broadcast: {a} @ {b}")
    return TensorType(a.dtype, (*batch, a.shape[-2], b.shape[-1]))


def _positions(n: Any, dim: str) -> tuple[int, ...] | str:
    a, b = n.src
    if a.shape[-1] == dim or b.shape[-2] == dim:
        return "a matrix product sums over positions"
    return (0, 1)


def _example(make: ExampleMaker) -> list[Any]:
    """A weight times the paper's [batch, features, positions], and a product over positions."""
    x = make.input("x", DType.float32, "batch", 4, "seq")
    y = make.input("y", DType.float32, "batch", "seq", 3)
    return [make(Op.MATMUL, make.param("w", DType.float32, 5, 4), x), make(Op.MATMUL, x, y)]


def _swap(make: Any, x: Any) -> Any:
    r = x.type.rank
    return make(Op.TRANSPOSE, x, perm=[*range(r - 2), r - 1, r - 2])


def _vjp(n: Any, ct: Any, make: Any) -> tuple[Any, Any]:
    """d(a b) = da b + a db: ct bᵀ and aᵀ ct, summed over the batch axes each operand was broadcast along."""
    a, b = n.src
    return (unbroadcast(make, make(Op.MATMUL, ct, _swap(make, b)), a),
            unbroadcast(make, make(Op.MATMUL, _swap(make, a), ct), b))


register(OpDef(Op.MATMUL, "a @ b over the last two axes", 2, _type, lambda n, a: np.matmul(a[0], a[1]),
               positions=_positions, layout="matmul", example=_example, vjp=_vjp))
