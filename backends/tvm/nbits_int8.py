"""The 4-bit product with int8 activations (onnxruntime's accuracy level 4): integer dot products on VNNI.

An option (compile_graph's int8_activations), not the default: the activations are rounded to int8 per
block of K, so the result is no longer the dequantized reference's (the error is reported beside
onnxruntime's by benchmarks/bench_int4.py and bounded in tests/backends/tvm/test_tvm_nbits_int8.py).

Activations, per token m and block j of K (inside the product's kernel, before its parallel loop; in numpy
`quantize_x_reference`):

    a = max |x[m, block j]|,  xs[m, j] = a / 127,  xq[m, k] = rint(x[m, k] · 127 / a)  (int8),
    xsum[m, j] = Σ xq over the block

Weights, re-packed once at compile time (`rows16`) so that one 64-byte vector holds 16 rows × 4 bytes,
the operand layout of `vpdpbusd` (u8 × s8, four products summed into each int32 lane):

    w16[n/16, j, g, r, t] = byte (g·4 + t) of block j of row 16·(n/16) + r   (Q4_0 nibble order:
                            low nibble k = j·bs + 4g + t, high nibble k = j·bs + bs/2 + 4g + t)
    s16[n/16, j, r], z16[n/16, j, r]   scales and zero points (one byte each) the same way

The kernel, for 16·R rows at a time (R independent accumulator chains):

    acc_i[r] = Σ_g dpbusd(lo(w16[.., g, :, :]), bcast(xq[4 bytes at 4g])) + dpbusd(hi(...), bcast(xq[bs/2 + 4g]))
    acc_f[r] += (float(acc_i[r]) − z16 · xsum[m, j]) · (s16 · xs[m, j])          (16 rows per vector)

so the nibbles are unpacked in registers (an AND and a shift per 128 codes), each instruction multiplies
64 codes, and no horizontal sum is left at the end: the lanes are the rows. Without VNNI (AVX2 only, as
on Zen 3) each dpbusd is vpmaddubsw (no saturation: 15 · 127 · 2 < 2¹⁵) then vpmaddwd by ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pseudoformer.backends.tvm.guard import require_tvm
from pseudoformer.backends.tvm.nbits_schedule import MIN_PARALLEL_BYTES
from pseudoformer.backends.tvm.parallel_gate import MIN_WORK_ATTR
from pseudoformer.backends.tvm.weight_values import derive
from pseudoformer.ir.graph import Graph
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op
from pseudoformer.ir.ops.quantized import operands
from pseudoformer.ir.types import DType, TensorType

tvm = require_tvm()
from tvm.script import tirx as T  # noqa: E402

ROWS = 16  # rows per vector: 16 int32 lanes (one zmm, or two ymm)


# ---- compile time: the weights in the rows-of-16 layout (numpy)


def rows16_codes(q4_0: np.ndarray) -> np.ndarray:
    """Packed 4-bit codes in Q4_0 nibble order [N, kb, bs/2] → [⌈N/16⌉, kb, bs/8, 16, 4] (rows zero-padded)."""
    n, kb, half = q4_0.shape
    pad = -n % ROWS
    q = np.concatenate([q4_0, np.zeros((pad, kb, half), np.uint8)]) if pad else q4_0
    return np.ascontiguousarray(q.reshape(-1, ROWS, kb, half // 4, 4).transpose(0, 2, 3, 1, 4))


def rows16_scales(scales: np.ndarray) -> np.ndarray:
    """Scales [N, kb] → [⌈N/16⌉, kb, 16] float32."""
    n, kb = scales.shape
    s = np.zeros((-(-n // ROWS) * ROWS, kb), np.float32)
    s[:n] = scales
    return np.ascontiguousarray(s.reshape(-1, ROWS, kb).transpose(0, 2, 1))


def rows16_zero_points(zp: np.ndarray | None, n: int, kb: int) -> np.ndarray:
    """Zero points (4-bit, packed two a byte [N, ⌈kb/2⌉], or None: 8) → one byte each, [⌈N/16⌉, kb, 16]."""
    z = np.full((-(-n // ROWS) * ROWS, kb), 8, np.uint8)
    if zp is not None:
        codes = np.stack([zp & 15, zp >> 4], axis=-1).reshape(n, -1)[:, :kb]
        z[:n] = codes
    return np.ascontiguousarray(z.reshape(-1, ROWS, kb).transpose(0, 2, 1))


def eligible(n: Node, split: set[str]) -> bool:
    """Whether MATMUL_NBITS node n takes the int8 kernel: 4 bits, float32, and its weights parameters in
    Q4_0's nibble order (nbits.split_params), so that they can be re-laid out at compile time."""
    o = operands(n)
    return (n.op is Op.MATMUL_NBITS and n.attrs["bits"] == 4 and n.attrs["block_size"] % 8 == 0
            and o.packed.op is Op.PARAM and o.packed.attrs["name"] in split and o.scales.op is Op.PARAM
            and o.scales.dtype is DType.float32 and (o.zero_points is None or o.zero_points.op is Op.PARAM))


def names(n: Node) -> tuple[str, str, str]:
    """The parameters the int8 kernel reads for node n: codes, scales and zero points in rows of 16."""
    packed = operands(n).packed.attrs["name"]
    return f"{packed}#rows16", f"{operands(n).scales.attrs['name']}#rows16", f"{packed}#z16"


def int8_params(graph: Graph, split: set[str]) -> dict[str, TensorType]:
    """The extra parameters (name → type) of the int8 kernels of `graph`, made by int8_weights. The 4-bit
    weights keep their own copy for anything else reading them (a tied embedding's gather)."""
    out: dict[str, TensorType] = {}
    for n in graph.nodes():
        if n.op is Op.MATMUL_NBITS and eligible(n, split):
            rows, kb, half = (int(d) for d in operands(n).packed.shape)
            n16 = -(-rows // ROWS)
            w, s, z = names(n)
            out[w] = TensorType(DType.uint8, (n16, kb, half // 4, ROWS, 4))
            out[s] = TensorType(DType.float32, (n16, kb, ROWS))
            out[z] = TensorType(DType.uint8, (n16, kb, ROWS))
    return out


def int8_weights(graph: Graph, split: set[str], weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The values of int8_params from `weights` (4-bit ones already in Q4_0's order, nbits.split_weights)."""
    out: dict[str, np.ndarray] = {}
    for n in graph.nodes():
        if n.op is Op.MATMUL_NBITS and eligible(n, split):
            o = operands(n)
            w, s, z = names(n)
            if w in out:
                continue
            packed = weights[o.packed.attrs["name"]]
            zp = None if o.zero_points is None else weights[o.zero_points.attrs["name"]]
            (rows, kb, half), groups = np.shape(packed), -(-np.shape(packed)[0] // ROWS)
            # lazy weights give lazy layouts (weight_values.derive), computed a matrix at a time
            out[w] = derive(rows16_codes, (groups, kb, half // 4, ROWS, 4), np.uint8, packed)
            out[s] = derive(lambda v: rows16_scales(np.asarray(v, np.float32)), (groups, kb, ROWS), np.float32,
                            weights[o.scales.attrs["name"]])
            out[z] = (rows16_zero_points(None, rows, kb) if zp is None else
                      derive(lambda v, n=rows, k=kb: rows16_zero_points(v, n, k), (groups, kb, ROWS), np.uint8, zp))
    return out


# ---- the activations, per token and block, in numpy: the reference for the kernel's own quantization


def quantize_x_reference(x: np.ndarray, block_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """quantize_x in numpy, the same float32 operations: for tests and the error report."""
    m, k = x.shape
    blocks = x.reshape(m, k // block_size, block_size).astype(np.float32)
    amax = np.abs(blocks).max(axis=-1)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
    xq = np.rint(blocks * inv[..., None]).astype(np.int8)
    return xq.reshape(m, k), (amax / np.float32(127.0)).astype(np.float32), xq.astype(np.int32).sum(-1, dtype=np.int32)


# ---- the product kernel (TVMScript: the vector instructions are chosen here, not by a schedule)


def isa(target: Any) -> str:
    """"avx512vnni", "avxvnni" or "avx2": the integer dot product the target's CPU has."""
    has = tvm.target.codegen.target_has_features
    if has("avx512vnni", target) and has("avx512bw", target):
        return "avx512vnni"
    return "avxvnni" if has("avxvnni", target) else "avx2"


def _dot(acc: Any, codes: Any, xb: Any, kind: str, lanes: int) -> Any:
    """acc (int32 × lanes) + the 4-byte dot products of codes (u8 × 4·lanes) with xb (s8, an int32 × lanes)."""
    a, b = T.reinterpret(f"int8x{4 * lanes}", codes), T.reinterpret(f"int8x{4 * lanes}", xb)
    if kind != "avx2":  # the VEX form (AVX-VNNI) shares the 256-bit intrinsic
        return T.call_llvm_pure_intrin(f"int32x{lanes}", f"llvm.x86.avx512.vpdpbusd.{lanes * 32}", acc, a, b)
    pairs = T.call_llvm_pure_intrin(f"int16x{2 * lanes}", "llvm.x86.avx2.pmadd.ub.sw", a, b)
    quads = T.call_llvm_pure_intrin(f"int32x{lanes}", "llvm.x86.avx2.pmadd.wd", pairs,
                                    T.broadcast(T.int16(1), 2 * lanes))
    return acc + quads


def matmul_int8_func(n16: int, kb: int, block_size: int, kind: str, *, quantizes: bool = False) -> Any:
    """The PrimFunc main(xq, xs, xsum, w16, s16, z16, y) for y [M, 16·n16] (M symbolic); with `quantizes`,
    main(x, w16, s16, z16, y), which first quantizes x [M, K] itself (quantize_x_reference's arithmetic, on
    the calling thread, into the call's own workspace): one kernel a product where a decode step had two, and
    three tensors fewer for the VM to allocate.

    One token (decode): 4 groups of 16 rows a task, 4 independent dpbusd chains. Four tokens or more
    (prefill): 2 groups of 16 rows × a tile of 4 tokens (2 with AVX2's 16 registers), so that each unpacked
    vector of codes serves every token of the tile: 8 integer and 8 float accumulators, no spills."""
    bs, groups = block_size, block_size // 8
    lanes = 16 if kind == "avx512vnni" else 8
    halves = ROWS // lanes  # vectors per 16 rows
    rr = next(r for r in (4, 2, 1) if n16 % r == 0)  # row groups per task: independent dpbusd chains
    rr_tile = next(r for r in (2, 1) if n16 % r == 0)
    mt = 4 if lanes == 16 else 2  # tokens per tile
    k_ext = kb * bs
    nb = 4 * lanes  # bytes per vector
    # Decoding a small matrix runs on one thread: below the float kernel's threshold of bytes a parallel
    # launch costs more than it saves (parallel_gate.py). Prefill (4 tokens or more) always splits.
    serial_decode = n16 * ROWS * kb * bs // 2 < MIN_PARALLEL_BYTES
    gate = {MIN_WORK_ATTR: 0}  # decided here, not by parallel_gate's count

    def block_dot(xq: Any, w16: Any, row: Any, j: Any, h: Any, m: Any) -> Any:
        """Σ over block j of codes × xq for 16 rows (lanes h·lanes …): an int32 vector, as one expression.
        No buffer holds it, so it stays in registers; the loads of w16 it repeats for each token of a tile are
        the same loads, which LLVM merges: each vector of codes is read and unpacked once for the tile."""
        acc = T.broadcast(T.int32(0), lanes)
        for g in range(groups):
            v = w16.vload([row, j, g, h * lanes, 0], f"uint8x{nb}")
            xlo = T.broadcast(T.reinterpret("int32", xq.vload([m, j * bs + g * 4], "int8x4")), lanes)
            xhi = T.broadcast(T.reinterpret("int32", xq.vload([m, j * bs + bs // 2 + g * 4], "int8x4")), lanes)
            acc = _dot(_dot(acc, v & T.broadcast(T.uint8(15), nb), xlo, kind, lanes),
                       v >> T.broadcast(T.uint8(4), nb), xhi, kind, lanes)
        return acc

    @T.macro
    def tile(xq: Any, xs: Any, xsum: Any, w16: Any, s16: Any, z16: Any, y: Any, task: Any, m0: Any, rows: int,
             tokens: int) -> None:
        """y[m0 : m0 + tokens, rows of task] (rows groups of 16)."""
        acc_f = T.alloc_buffer((tokens * rows * ROWS,), "float32", scope="local")
        for t, r, h in T.grid(tokens, rows, halves):
            acc_f[T.ramp(t * rows * ROWS + r * ROWS + h * lanes, 1, lanes)] = T.broadcast(T.float32(0), lanes)
        for j in range(kb):
            for t in T.unroll(tokens):
                for r in T.unroll(rows):
                    for h in T.unroll(halves):
                        at = T.ramp(t * rows * ROWS + r * ROWS + h * lanes, 1, lanes)
                        nrow = task * rows + r
                        zf = T.Cast(f"float32x{lanes}", z16.vload([nrow, j, h * lanes], f"uint8x{lanes}"))
                        d = T.Cast(f"float32x{lanes}", block_dot(xq, w16, nrow, j, h, m0 + t)) - zf * T.broadcast(
                            T.Cast("float32", xsum[m0 + t, j]), lanes)
                        sx = s16.vload([nrow, j, h * lanes], f"float32x{lanes}") * T.broadcast(xs[m0 + t, j], lanes)
                        acc_f[at] = acc_f[at] + d * sx
        for t in T.unroll(tokens):
            for r in T.unroll(rows):
                for h in T.unroll(halves):
                    y[m0 + t, T.ramp((task * rows + r) * ROWS + h * lanes, 1, lanes)] = acc_f[
                        T.ramp(t * rows * ROWS + r * ROWS + h * lanes, 1, lanes)]

    @T.macro
    def product(xq: Any, xs: Any, xsum: Any, w16: Any, s16: Any, z16: Any, y: Any, m_ext: Any) -> None:
        if m_ext < mt:
            if serial_decode:
                for task, m in T.grid(n16 // rr, m_ext):
                    tile(xq, xs, xsum, w16, s16, z16, y, task, m, rr, 1)
            else:
                for task in T.parallel(n16 // rr, annotations=gate):
                    for m in range(m_ext):
                        tile(xq, xs, xsum, w16, s16, z16, y, task, m, rr, 1)
        else:
            for task in T.parallel(n16 // rr_tile, annotations=gate):
                for mo in range(m_ext // mt):
                    tile(xq, xs, xsum, w16, s16, z16, y, task, mo * mt, rr_tile, mt)
                for m in range(m_ext - m_ext % mt, m_ext):
                    tile(xq, xs, xsum, w16, s16, z16, y, task, m, rr_tile, 1)

    @T.macro
    def quantize(x: Any, xq: Any, xs: Any, xsum: Any, m_ext: Any) -> None:
        """quantize_x_reference's arithmetic, serially: a pass over M·K numbers before the product."""
        amax = T.alloc_buffer((1,), "float32", scope="local")
        total = T.alloc_buffer((1,), "int32", scope="local")
        for m, j in T.grid(m_ext, kb):
            amax[0] = T.float32(0)
            for i in range(bs):
                amax[0] = T.max(amax[0], T.abs(x[m, j * bs + i]))
            xs[m, j] = amax[0] / T.float32(127.0)
            total[0] = 0
            for i in range(bs):
                xq[m, j * bs + i] = T.Cast("int8", T.nearbyint(x[m, j * bs + i] * T.Select(
                    amax[0] > T.float32(0), T.float32(127.0) / amax[0], T.float32(0))))
                total[0] = total[0] + T.Cast("int32", xq[m, j * bs + i])
            xsum[m, j] = total[0]

    @T.prim_func(s_tir=True)
    def main(xq_h: T.handle, xs_h: T.handle, xsum_h: T.handle, w16: T.Buffer((n16, kb, groups, ROWS, 4), "uint8"),
             s16: T.Buffer((n16, kb, ROWS), "float32"), z16: T.Buffer((n16, kb, ROWS), "uint8"), y_h: T.handle):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
        m_ext = T.int64()
        xq = T.match_buffer(xq_h, (m_ext, k_ext), "int8")
        xs = T.match_buffer(xs_h, (m_ext, kb), "float32")
        xsum = T.match_buffer(xsum_h, (m_ext, kb), "int32")
        y = T.match_buffer(y_h, (m_ext, n16 * ROWS), "float32")
        product(xq, xs, xsum, w16, s16, z16, y, m_ext)

    @T.prim_func(s_tir=True)
    def fused(x_h: T.handle, w16: T.Buffer((n16, kb, groups, ROWS, 4), "uint8"),
              s16: T.Buffer((n16, kb, ROWS), "float32"), z16: T.Buffer((n16, kb, ROWS), "uint8"), y_h: T.handle):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
        m_ext = T.int64()
        x = T.match_buffer(x_h, (m_ext, k_ext), "float32")
        y = T.match_buffer(y_h, (m_ext, n16 * ROWS), "float32")
        xq = T.alloc_buffer((m_ext, k_ext), "int8")
        xs = T.alloc_buffer((m_ext, kb), "float32")
        xsum = T.alloc_buffer((m_ext, kb), "int32")
        quantize(x, xq, xs, xsum, m_ext)
        product(xq, xs, xsum, w16, s16, z16, y, m_ext)

    return fused if quantizes else main
