"""The CPU schedule of the block-quantized matrix product (nbits.py): one row of W per step, in registers.

    for n4 in parallel(N / 4):       # output rows, four at a time, split between the cores
      for m in M:                    # tokens: one when decoding
        acc[0:4, 0:L] = 0            # L lanes: one vector register (AVX-512) or two (AVX2) per row
        for j, b_outer in K/bs, bs/2/L:
          for r in unrolled(4):      # independent FMA chains; x's vectors loaded once for the four
            acc[r, 0:L] += s[n, j] · (xz + xl · float(q) + x2 · float(q >> 4))    # L bytes of W (nbits._x_terms)
        y[m, 4·n4 + r] = Σ acc[r]         # unrolled: the lanes summed in registers

The reduction over a block's bytes is split by L and rfactor-ed, so the L lanes are independent
partial sums: a vector of L bytes is loaded, widened, unpacked, converted and multiplied in
registers, and no float weight is ever stored. The per-token terms xl, x2, xz are computed first, each
its own vectorised loop. L is 16 bytes (32 weights) or the block's bytes
if fewer; LLVM maps a 16-lane float vector onto whatever the target (the host CPU, build.py's
make_target) has: one zmm with AVX-512, two ymm with AVX2.

Prefill runs the same nest with m > 1: W's row n stays in L1 while every token passes over it, so
W is read from memory once per call, but each row's unpacking is repeated per token.
"""

from __future__ import annotations

from typing import Any

from pseudoformer.backends.tvm.guard import require_tvm
from pseudoformer.backends.tvm.parallel_gate import MIN_WORK_ATTR

tvm = require_tvm()
from tvm import s_tir, tirx  # noqa: E402

LANES = 16
X_TERMS = ("x_lo", "x_hi16", "x_sum")
ROWS = 4  # rows of W per step: four independent accumulator chains, one load of x for all four
# Bytes of codes (M · N · K / 2 for 4 bits) a call must read to split its rows between the cores; below it
# the call runs on one thread (parallel_gate.py). Under load a split call waits for a descheduled worker
# (2048 × 256 at one token: 16× slower on two threads with one other process busy); quiet, SmolLM2's decode
# products (55–442 KB) split are ~12 % faster a step than serial at a 512 KB threshold (benchmarks/README.md).
MIN_PARALLEL_BYTES = 1 << 16


def schedule_nbits(func: Any, target: Any, _tunable: bool = False) -> Any:
    """A dlight rule: the Schedule of nbits.matmul_nbits's PrimFunc for a CPU, None for any other."""
    if not isinstance(func, tirx.PrimFunc) or target.kind.name != "llvm":
        return None  # on a GPU dlight's GEMV and matmul rules take it (benchmarks/gpu_int4.py)
    sch = s_tir.Schedule(func)
    try:
        blk = sch.get_sblock("matmul_nbits")
    except Exception:  # not ours: no such block
        return None
    m, n, j, b = sch.get_loops(blk)
    ext = sch.get(b).extent
    lanes = min(int(ext), LANES) if isinstance(ext, tirx.IntImm) else 1
    bo, bi = sch.split(b, [None, lanes])
    n_ext = sch.get(n).extent
    rows = ROWS if isinstance(n_ext, tirx.IntImm) and int(n_ext) % ROWS == 0 else 1
    no, ni = sch.split(n, [None, rows])
    sch.reorder(no, m, j, bo, ni, bi)
    rf = sch.rfactor(bi, factor_axis=2)
    no_rf, m_rf, j_rf, *_ = sch.get_loops(rf)
    sch.reverse_compute_at(blk, m_rf)  # the lanes' sums under the same (rows, m): acc lives per tile
    # Unrolled, the lanes' sums are straight-line code whose partial sums LLVM keeps in registers; as a loop
    # each add waited on the store before it (2× the time of the products for K = 576, measured).
    for loop in sch.get_loops(blk)[2:]:  # the lanes, and the rows where there are several
        sch.unroll(loop)
    sch.parallel(no_rf)
    sch.annotate(no_rf, MIN_WORK_ATTR, MIN_PARALLEL_BYTES)
    *_, ni_rf, bi_rf = sch.get_loops(rf)
    sch.vectorize(bi_rf)
    sch.unroll(ni_rf)
    sch.decompose_reduction(rf, j_rf)
    for name in X_TERMS:  # the 4-bit product's activation terms (nbits._x_terms): small, per token
        try:
            xb = sch.get_sblock(name)
        except Exception:  # 8 bits: none
            continue
        inner = sch.get_loops(xb)[-1]
        if isinstance(sch.get(inner).extent, tirx.IntImm):
            sch.vectorize(inner)
    return sch
