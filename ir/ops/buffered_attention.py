"""Attention over a key/value cache kept in buffers of a fixed capacity, which it appends to.

    BUFFERED_ATTENTION(q, k, v, k_buf, v_buf, length) = (y, k_buf', v_buf')

    k_buf' = k_buf with positions [length, length + s) replaced by k (s = k's positions), v_buf' likewise;
    y      = ATTENTION(q, k_buf'[.., :length + s, :], v_buf'[.., :length + s, :])

q [.., H_q, s_q, d], k [.., H_kv, s, d], v [.., H_kv, s, d_v], k_buf [.., H_kv, C, d], v_buf [.., H_kv, C, d_v],
length an int64 scalar: the batched form of ATTENTION (grouped-query heads, causal bottom-right aligned, window
and soft-cap as there), no mask operand. A buffer's positions from length + s on are never read, so what they hold
does not matter. length + s ≤ C is the caller's to keep: the interpreter refuses a call that breaks it, a kernel
asserts it.

It is the decode step of a cache in buffers (passes/kv_buffers.py states that step's contract). The buffers are
overwritten (OpDef.overwrites): a backend writes the new positions into the buffers it was given and returns
them (TVM's kernel, backends/tvm/attention_kernel.py), so the verifier holds each buffer operand to be a graph
input read by this node alone. The reference here copies them first, as a function does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.attention import ATTRS, _batched_type, _check, attend, by_parts
from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import (
    EvalError,
    ExampleMaker,
    IRTypeError,
    NodeMaker,
    OpDef,
    integers,
    register,
)
from pseudoformer.ir.types import DType, TensorType, TupleType

K_BUF, V_BUF, LENGTH = 3, 4, 5  # operand positions


def _type(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TupleType:
    q, k, v, kb, vb, length = src
    if attrs.get("q_heads", 0) or attrs.get("kv_heads", 0):
        raise IRTypeError("buffered_attention takes the batched form (heads as an axis), not packed heads")
    if length.dtype is not DType.int64 or length.rank != 0:
        raise IRTypeError(f"buffered_attention's length must be an int64 scalar, got {length}")
    for buf, new, what in ((kb, k, "key"), (vb, v, "value")):
        if buf.dtype is not new.dtype or buf.rank != new.rank or buf.shape[:-2] != new.shape[:-2] \
                or buf.shape[-1] != new.shape[-1]:
            raise IRTypeError(f"a {what} buffer {buf} cannot hold {what}s {new}")
    if kb.shape[-2] != vb.shape[-2]:
        raise IRTypeError(f"key and value buffers of different capacities: {kb}, {vb}")
    out, _ = _batched_type(q, k, v)
    return TupleType((out, kb, vb))


def _impl(n: Any, a: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    q, k, v, kb, vb, length = a
    start, new, capacity = int(length), k.shape[-2], kb.shape[-2]
    if not 0 <= start <= capacity - new:
        raise EvalError(f"the cache buffers hold {capacity} positions: {start} kept and {new} new do not fit")
    kb, vb = kb.copy(), vb.copy()
    kb[..., start:start + new, :], vb[..., start:start + new, :] = k, v
    end = start + new
    y = attend(q, kb[..., :end, :], vb[..., :end, :], None, n.attrs["scale"], n.attrs["causal"],
               n.attrs.get("softmax_fp32", False), n.attrs.get("window", 0), n.attrs.get("softcap", 0.0))
    return y, kb, vb


def _written(make: NodeMaker, buf: Any, new: Any, inside: Any, index: Any) -> Any:
    """buf with its positions [length, length + s) taken from new: a select over the whole buffer."""
    axis = buf.type.rank - 2
    taken = make(Op.GATHER, new, index, axis=axis)  # new's row p − length at every buffer position p
    return make(Op.WHERE, inside, taken, buf)


def _formula(n: Any, make: NodeMaker) -> tuple[Any, Any, Any]:
    """For a backend without the kernel: the buffers rewritten by a select (every position, so no faster than a
    concatenation), then attention by parts over the whole buffers, the positions from length + s on masked out
    with those the causal limit and the window hide (no slice of a size read from data, which torch refuses)."""
    q, k, v, kb, vb, length = n.src
    axis = kb.type.rank - 2
    capacity, new = make(Op.DIM, kb, axis=axis), make(Op.DIM, k, axis=axis)
    i64 = DType.int64
    zero = make.const(0, i64)
    cols = make(Op.ARANGE, capacity, dim=kb.shape[axis])  # buffer position p, [C]
    rel = make(Op.SUB, cols, length)  # p − length
    inside = make(Op.AND, make(Op.GE, rel, zero), make(Op.LT, rel, new))
    index = make(Op.MAX, make(Op.MIN, rel, make(Op.SUB, new, make.const(1, i64))), zero)
    inside = make(Op.UNSQUEEZE, inside, axes=[1])  # [C, 1]: broadcast over the features
    kb2, vb2 = _written(make, kb, k, inside, index), _written(make, vb, v, inside, index)
    end = make(Op.ADD, length, new)
    # query i is position end − s_q + i (bottom-right aligned, as ATTENTION's causal)
    n_q = make(Op.DIM, q, axis=axis)
    rows = make(Op.ADD, make(Op.ARANGE, n_q, dim=q.shape[axis]), make(Op.SUB, end, n_q))
    rows, cols = make(Op.UNSQUEEZE, rows, axes=[1]), make(Op.UNSQUEEZE, cols, axes=[0])
    keep = make(Op.GE, rows, cols) if n.attrs["causal"] else make(Op.LT, cols, make(Op.UNSQUEEZE, end, axes=[0]))
    if n.attrs.get("window", 0):
        keep = make(Op.AND, keep, make(Op.LT, make(Op.SUB, rows, cols), make.const(int(n.attrs["window"]), i64)))
    attrs = {**n.attrs, "causal": False, "window": 0}
    return by_parts(make, q, kb2, vb2, keep, attrs), kb2, vb2


def _example(make: ExampleMaker) -> list[Any]:
    """New positions written into buffers of 16 at a drawn length (0–3) over buffers of random values (which
    must not show through): all three results; grouped-query heads (4 over 2) in a window of 3; every key (not
    causal), soft-capped."""
    f32 = DType.float32
    q, k, v = (make.input(n, f32, "batch", 2, "seq", d) for n, d in (("q", 4), ("k", 4), ("v", 3)))
    q4 = make.input("q4", f32, "batch", 4, "seq", 4)
    length = make.input("length", DType.int64, values=integers(0, 4))
    kb, vb, kb2, vb2, kb3, vb3 = (make.input(f"{kv}_buffer{i}", f32, "batch", 2, 16, d)
                                  for i in range(3) for kv, d in (("k", 4), ("v", 3)))
    plain = make(Op.BUFFERED_ATTENTION, q, k, v, kb, vb, length, scale=0.5, causal=True)
    grouped = make(Op.BUFFERED_ATTENTION, q4, k, v, kb2, vb2, length, scale=0.5, causal=True, window=3)
    every = make(Op.BUFFERED_ATTENTION, q, k, v, kb3, vb3, length, scale=0.5, causal=False, softcap=1.5)
    return [*(make(Op.GET, plain, index=i) for i in range(3)), make(Op.GET, grouped, index=0),
            make(Op.GET, every, index=0)]


register(OpDef(Op.BUFFERED_ATTENTION, "attention over a cache in buffers, the new keys and values written into them",
               6, _type, _impl, attrs=ATTRS, decompose=_formula, check=_check, example=_example,
               overwrites=(K_BUF, V_BUF)))
