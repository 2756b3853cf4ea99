"""EXPERT_MATMUL: each row's own expert matrix times the row, y[…, i] = Σ_j W[r[…], i, j] x[…, j] (a mixture of
experts' Σ_j W_1[R[c, t], i, j] X[j, t]). The formula gathers one matrix per row, a copy of n·m numbers per token;
the ONNX lowering instead groups the rows by expert and runs one product per expert on its rows, so the work is
that of the rows, not of their copies (passes/rules/expert_matmul.py makes the op)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import ExampleMaker, IRTypeError, NodeMaker, OpDef, register
from pseudoformer.ir.types import DType, TensorType, broadcast_shapes


def _type(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    w, r, x = src
    if w.rank != 3 or r.dtype is not DType.int64 or x.rank < 1:
        raise IRTypeError(f"expert_matmul of {w} by routes {r} and rows {x}: W is [experts, out, in], routes int64")
    if x.shape[-1] != w.shape[2]:
        raise IRTypeError(f"expert_matmul: rows of {x.shape[-1]} entries for experts of {w.shape[2]} inputs")
    if broadcast_shapes(r.shape, x.shape[:-1]) != r.shape:
        raise IRTypeError(f"expert_matmul: rows {x} do not broadcast to the routes {r}")
    return TensorType(w.dtype, (*r.shape, w.shape[1]))


def _impl(n: Any, a: list[np.ndarray]) -> np.ndarray:
    w, r, x = a
    return np.einsum("...ij,...j->...i", w[r], x).astype(w.dtype, copy=False)


def _formula(n: Any, make: NodeMaker) -> Any:
    """gather, then the product summed over j: the per-row copies (for a backend without the grouped form)."""
    w, r, x = n.src
    picked = make(Op.GATHER, w, r, axis=0)  # [..., n, m]
    return make(Op.REDUCE_SUM, make(Op.MUL, picked, make(Op.UNSQUEEZE, x, axes=[x.type.rank - 1])),
                axes=[picked.type.rank - 1], keepdims=False)


def _positions(n: Any, dim: str) -> tuple[int, ...]:
    return (1, 2)


def _example(make: ExampleMaker) -> list[Any]:
    """Rows per (batch, seq) with two routes each (x broadcast over them), and one route per row."""
    w = make.param("w", DType.float32, 4, 3, 5)
    x = make.input("x", DType.float32, "batch", "seq", 5)
    scores = make(Op.MATMUL, x, make.param("router", DType.float32, 5, 4))
    two = make(Op.TOPK, scores, k=2, axis=2, result="indices")  # [batch, seq, 2]
    one = make(Op.TOPK, scores, k=1, axis=2, result="indices")
    return [make(Op.EXPERT_MATMUL, w, two, make(Op.UNSQUEEZE, x, axes=[2])),
            make(Op.EXPERT_MATMUL, w, make(Op.SQUEEZE, one, axes=[2]), x)]


register(OpDef(Op.EXPERT_MATMUL, "y[…, i] = Σ_j W[r[…], i, j] x[…, j]: each row times its own expert's matrix", 3,
               _type, _impl, positions=_positions, decompose=_formula, example=_example))
