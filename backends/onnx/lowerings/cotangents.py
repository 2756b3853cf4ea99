"""Shorter ONNX for the formulas the autodiff's VJP rules write (ir/ops/cotangents.py), which the IR spells
with the ops it has. Each helper returns None when the node is not that formula, and the lowering of the
op then emits its general form. The ONNX nodes of operands these forms no longer read become dead, and
lower.py prunes them (onnxruntime runs every node it is given).

    cast(x < x)                          zeros like x        → ConstantOfShape(Shape(x))
    where(x < x, 0, c)                   c broadcast to x    → Expand(c, Shape(x))
    scatter(zeros like x, a + k, c)      a slice's transpose → Pad(c), k zeros before and the rest after
    Σ_b (aᵀ c)[b]   (a, c: [B, ℓ, ·])    a weight's gradient over a batch
                                                             → Gemm(flat a, flat c, transA): one product
                                                               over the B·ℓ rows, not B products of the
                                                               weight's size summed (B times its memory)
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from pseudoformer.backends.onnx.emitter import ELEM, Emitter
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

# Off, every op lowers in its general form: benchmarks/bench_train.py's "plain lowering" variant, the
# before of a before/after in one interleaved run.
SHORT_FORMS = True


def _self_less(n: Node) -> Node | None:
    """x for the node x < x (false everywhere, NaN and ±∞ included), else None."""
    if n.op is Op.LT and n.src[0] is n.src[1]:
        return n.src[0]
    return None


def zeros(e: Emitter, n: Node) -> str | None:
    """cast(x < x) as ConstantOfShape(Shape(x)): no pass over x, no bool tensor."""
    x = _self_less(n.src[0])
    if x is None or not n.dtype.is_float or not SHORT_FORMS:
        return None
    shape = e.emit("Shape", [e.value(x)])
    zero = helper.make_tensor("zero", ELEM[n.dtype], [1], np.zeros(1))
    return e.emit("ConstantOfShape", [shape], out=e.out, value=zero)


def expanded(e: Emitter, n: Node) -> str | None:
    """where(x < x, 0, c) as Expand(c, Shape(x)): where's result has the broadcast shape of x and c."""
    cond, zero, ct = n.src
    x = _self_less(cond)
    if x is None or not SHORT_FORMS or zero.op is not Op.CONST or np.any(np.asarray(zero.attrs["value"]) != 0):
        return None
    return e.emit("Expand", [e.value(ct), e.emit("Shape", [e.value(x)])], out=e.out)


def _contiguous_start(idx: Node) -> Node | None:
    """k for positions arange(m) + k (or k + arange(m)), else None."""
    if idx.op is not Op.ADD:
        return None
    for r, k in (idx.src, reversed(idx.src)):
        if r.op is Op.ARANGE and k.type.rank == 0:
            return k
    return None


def padded(e: Emitter, n: Node) -> str | None:
    """scatter(cast(x < x), arange(m) + k, c) on axis a as Pad(c): k zeros before on a, size − k − m after."""
    data, idx, upd = n.src
    first = _contiguous_start(idx)
    x = _self_less(data.src[0]) if data.op is Op.CAST else None
    if first is None or x is None or idx.type.rank != 1 or not SHORT_FORMS:
        return None
    rank, axis = data.type.rank, n.attrs["axis"] % data.type.rank
    before = e.emit("Unsqueeze", [e.value(first), e.ints([0])])
    after = e.emit("Sub", [e.emit("Sub", [e.shape_dim(e.value(x), axis), before]),
                           e.shape_dim(e.value(upd), axis)])
    parts = [e.ints([0] * axis), before, e.ints([0] * (rank - 1)), after, e.ints([0] * (rank - axis - 1))]
    pads = e.emit("Concat", [p for p, size in zip(parts, (axis, 1, rank - 1, 1, rank - axis - 1), strict=True)
                             if size], axis=0)
    return e.emit("Pad", [e.value(upd), pads], out=e.out, mode="constant")


def batched_weight_gradient(e: Emitter, n: Node) -> str | None:
    """reduce_sum(matmul(transpose(a, [0, 2, 1]), c), axes=[0]) for a: [B, ℓ, k], c: [B, ℓ, n] as
    Gemm(Flatten(a), Flatten(c), transA=1): the sum over B folded into the product's sum over ℓ."""
    if not SHORT_FORMS or n.attrs.get("keepdims") or [ax % n.src[0].type.rank for ax in n.attrs["axes"]] != [0]:
        return None
    m = n.src[0]
    if m.op is not Op.MATMUL or m.type.rank != 3 or m.src[0].op is not Op.TRANSPOSE:
        return None
    t, c = m.src
    a = t.src[0]
    if list(t.attrs["perm"]) != [0, 2, 1] or a.type.rank != 3 or c.type.rank != 3 or not n.dtype.is_float:
        return None
    flat_a = e.emit("Flatten", [e.value(a)], axis=2)
    flat_c = e.emit("Flatten", [e.value(c)], axis=2)
    return e.emit("Gemm", [flat_a, flat_c], out=e.out, transA=1)
