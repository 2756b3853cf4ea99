"""Block-quantized kernels for the TVM backend: MATMUL_NBITS and GATHER_NBITS as TE computations.

The formats are ir/ops/quantized.py's (onnxruntime's MatMulNBits layout); the numbers are its
reference's, dequantize then the float op, computed in float32 whatever the node's accuracy level
(onnxruntime's level 0, which its tests call exact).

The matrix product never makes the float weights. Its reduction runs over (block j, byte b): each
byte of a 4-bit row holds two codes, unpacked with a mask and a shift, made float, multiplied by
the activations they stand for and by the block's scale, and summed (8 bits: one code a byte).

Nibble order. In onnxruntime's layout byte b of a block holds k = 2b (low nibble) and 2b + 1, so
the activations a vector of bytes meets are every other one: a strided load, which LLVM makes
one scalar load per lane (8× slower, measured). A weight that only these kernels read is
therefore re-packed once, in numpy at compile time (`split_nibbles`, as packing.py packs float
weights), to llama.cpp's Q4_0 order: byte b holds k = b low and k = b + bs/2 high, and both halves
of the activations are contiguous vectors. `split_params` names the weights that may be; a
packed operand computed in the graph keeps onnxruntime's order (`split=False`).

    y[m, n] = Σ_j s[n, j] · Σ_b x[m, j·bs + b] · (lo(q[n, j, b]) − z) + x[m, j·bs + bs/2 + b] · (hi(q) − z)

computed as Σ_j s[n, j] · Σ_b xz + xl · float(q) + x2 · float(q >> 4) with per-token terms (`_x_terms`).

nbits_schedule.py puts the product on the CPU's vectors; the gather is injective and takes the
fallback schedule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pseudoformer.backends.tvm.guard import require_tvm
from pseudoformer.backends.tvm.weight_values import derive
from pseudoformer.ir.graph import Graph
from pseudoformer.ir.ops import Op
from pseudoformer.ir.ops.quantized import operands

tvm = require_tvm()
from tvm import te, tirx  # noqa: E402

F32 = "float32"
NBITS_OPS = (Op.MATMUL_NBITS, Op.GATHER_NBITS)


# ---- the nibble order of weights (compile time, numpy)


def split_params(graph: Graph) -> set[str]:
    """The 4-bit packed weights (parameters) that only MATMUL_NBITS and GATHER_NBITS read, as their packed operand."""
    readers: dict[str, list[bool]] = {}
    for n in graph.nodes():
        for i, s in enumerate(n.src):
            if s.op is Op.PARAM:
                ok = n.op in NBITS_OPS and n.attrs["bits"] == 4 and s is operands(n).packed and i == (
                    1 if n.op is Op.MATMUL_NBITS else 0)
                readers.setdefault(s.attrs["name"], []).append(ok)
    return {name for name, oks in readers.items() if all(oks)}


def split_nibbles(packed: np.ndarray) -> np.ndarray:
    """onnxruntime's order [N, kb, bs/2] (byte b: k = 2b, 2b + 1) → Q4_0's (byte b: k = b, b + bs/2)."""
    codes = np.empty((*packed.shape[:-1], 2 * packed.shape[-1]), np.uint8)
    codes[..., 0::2] = packed & 0x0F
    codes[..., 1::2] = packed >> 4
    half = packed.shape[-1]
    return np.ascontiguousarray(codes[..., :half] | (codes[..., half:] << 4))


def split_weights(graph: Graph, weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The weights with each of `split_params(graph)` in Q4_0's nibble order, the rest as they are (a lazy
    weight's re-ordering is lazy too: weight_values.derive)."""
    split = split_params(graph)
    return {k: derive(split_nibbles, np.shape(v), np.uint8, v) if k in split else v for k, v in weights.items()}


# ---- the computations


def _zero_point(zp: te.Tensor | None, n: Any, j: Any, bits: int) -> Any:
    """z[n, j] as int32: unpacked from the packed zero points, or the symmetric 2^(bits−1)."""
    if zp is None:
        return tirx.const(1 << (bits - 1), "int32")
    if bits == 8:
        return zp[n, j].astype("int32")
    byte = zp[n, j // 2].astype("int32")
    return (byte >> ((j % 2) * 4).astype("int32")) & 15


def _nibbles(q: Any) -> tuple[Any, Any]:
    """A packed byte's low and high 4-bit codes, as int32."""
    q = q.astype("int32")
    return (q & 15), (q >> 4)


def _x_terms(x: te.Tensor, kb: Any, bs: int, split: bool, z: int | None) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    """Per token, the activations as the 4-bit product reads them, each [M, kb, bs/2] (a third of x's size apiece):

      xl = x_lo, the activations of the low nibbles;   x2 = x_hi − 16·x_lo;
      xz = −z·(x_lo + x_hi) for a symmetric z, else x_lo + x_hi (multiplied by each block's −z).

    With f = float(byte) and h = float(byte >> 4) (so lo = f − 16h), a byte's term is
    x_lo·(lo − z) + x_hi·(hi − z) = xl·f + x2·h + xz: two conversions and three FMAs, no mask and no
    integer subtraction (10 → 7 vector instructions per 32 weights, measured in the assembly). Gathering
    x_lo and x_hi here also makes onnxruntime's interleaved nibble order (split=False) contiguous."""
    m_ext, h = x.shape[0], bs // 2

    def lo(m: Any, j: Any, b: Any) -> Any:
        return x[m, j * bs + b] if split else x[m, j * bs + 2 * b]

    def hi(m: Any, j: Any, b: Any) -> Any:
        return x[m, j * bs + h + b] if split else x[m, j * bs + 2 * b + 1]

    shape = (m_ext, kb, h)
    xl = te.compute(shape, lo, name="x_lo")
    x2 = te.compute(shape, lambda m, j, b: hi(m, j, b) - tirx.const(16.0, F32) * lo(m, j, b), name="x_hi16")
    if z is None:
        xz = te.compute(shape, lambda m, j, b: lo(m, j, b) + hi(m, j, b), name="x_sum")
    else:
        xz = te.compute(shape, lambda m, j, b: tirx.const(-float(z), F32) * (lo(m, j, b) + hi(m, j, b)),
                        name="x_sum")
    return xl, x2, xz


def matmul_nbits(x: te.Tensor, packed: te.Tensor, scales: te.Tensor, zp: te.Tensor | None, *, bits: int,
                 block_size: int, split: bool) -> te.Tensor:
    """y [M, N] = x [M, kb·bs] · Wᵀ for W block-quantized (x zero-padded past K by the caller)."""
    m_ext, n_ext, kb = x.shape[0], packed.shape[0], packed.shape[1]
    bs = block_size
    j = te.reduce_axis((0, kb), "j")
    if bits == 4:
        b = te.reduce_axis((0, bs // 2), "b")
        xl, x2, xz = _x_terms(x, kb, bs, split, None if zp is not None else 8)

        def pair(m: Any, n: Any) -> Any:
            byte = packed[n, j, b].astype("int32")
            # the constant term first, so that each product is an FMA into it (LLVM contracts a·b + c in order)
            c = xz[m, j, b] if zp is None else -xz[m, j, b] * _zero_point(zp, n, j, 4).astype(F32)
            dot = (c + xl[m, j, b] * byte.astype(F32)) + x2[m, j, b] * (byte >> 4).astype(F32)
            return te.sum(dot * scales[n, j].astype(F32), axis=[j, b])

        return te.compute((m_ext, n_ext), pair, name="matmul_nbits")
    i = te.reduce_axis((0, bs), "i")

    def one(m: Any, n: Any) -> Any:
        w = (packed[n, j, i].astype("int32") - _zero_point(zp, n, j, 8)).astype(F32)
        return te.sum(x[m, j * bs + i] * w * scales[n, j].astype(F32), axis=[j, i])

    return te.compute((m_ext, n_ext), one, name="matmul_nbits")


def _weight(packed: te.Tensor, scales: te.Tensor, zp: te.Tensor | None, n: Any, c: Any, bits: int, bs: int,
            split: bool) -> Any:
    """W[n, c] in float32, one weight unpacked and scaled (the gather and the GPU product's dequantize stage)."""
    j, i = c // bs, c % bs
    if bits == 4:
        byte = packed[n, j, i % (bs // 2) if split else i // 2].astype("int32")
        shift = (i // (bs // 2) if split else i % 2) * 4
        code = (byte >> shift.astype("int32")) & 15
    else:
        code = packed[n, j, i].astype("int32")
    return (code - _zero_point(zp, n, j, bits)).astype(F32) * scales[n, j].astype(F32)


def dequantized(packed: te.Tensor, scales: te.Tensor, zp: te.Tensor | None, *, bits: int, block_size: int,
                split: bool) -> te.Tensor:
    """W [N, kb·bs] in float32 as a TE stage of its own: the form dlight's GPU rules (GEMV, matmul) take,
    inlining it into the product's loads (MLC-LLM's dequantize-GEMV), so that it is never stored either."""
    n_ext, kb = packed.shape[0], packed.shape[1]
    bs = block_size

    return te.compute((n_ext, kb * bs), lambda n, c: _weight(packed, scales, zp, n, c, bits, bs, split),
                      name="dequantize")


def matmul_dequantized(x: te.Tensor, packed: te.Tensor, scales: te.Tensor, zp: te.Tensor | None, *, bits: int,
                       block_size: int, split: bool) -> te.Tensor:
    """The product for GPU targets: `dequantized`, then y[m, n] = Σ_k x[m, k] · W[n, k] (dlight schedules both)."""
    w = dequantized(packed, scales, zp, bits=bits, block_size=block_size, split=split)
    k = te.reduce_axis((0, w.shape[1]), "k")
    return te.compute((x.shape[0], w.shape[0]), lambda m, n: te.sum(x[m, k] * w[n, k], axis=k), name="matmul_nbits")


def gather_nbits(packed: te.Tensor, ids: te.Tensor, scales: te.Tensor, zp: te.Tensor | None, *, bits: int,
                 block_size: int, k: int, split: bool) -> te.Tensor:
    """Rows ids [R] of W [N, K], dequantized: [R, K] in the scales' dtype. An index wraps (floormod),
    as the float gather's mode="wrap" does: numpy.take for every valid index, negative ones included."""
    n_ext, bs = packed.shape[0], block_size

    def row(r: Any, c: Any) -> Any:
        n = tirx.floormod(ids[r], n_ext)
        return _weight(packed, scales, zp, n, c, bits, bs, split).astype(scales.dtype)

    return te.compute((ids.shape[0], k), row, name="gather_nbits")
