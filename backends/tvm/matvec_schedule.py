"""The decode schedule of a float32 product by a packed weight: a few rows of x against W, read once, streaming.

At one token a product x [1, K] · W [K, N] does two flops per weight: its time is the time to read W. The GEMM
kernel (schedule._matmul) pads the rows to its register tile (six) and so multiplies five rows of zeros, keeps
one accumulator chain per panel, and pads x into a buffer first. This one, for W packed as Wp [N/16, K, 16]
(packing.py: each panel of 16 columns one contiguous stream of K · 64 bytes):

    for g in parallel(panels / P):          # P panels at a time, split between the cores
      for m in rows:                        # tokens: one when decoding, a few at most
        acc[0:P, 0:16] = 0                  # P × one zmm (AVX-512) or two ymm (AVX2): P independent FMA chains
        for k in K:                         # P streams, each contiguous; x[m, k] broadcast once for the P
          for p in unrolled(P):
            acc[p, 0:16] += x[m, k] · Wp[g·P + p, k, 0:16]
        y[m, 16·(g·P + p) + c] = epilogue(acc[p, c])      # bias, residual, … fused on the tile

P is 8 where the CPU has AVX-512 (eight of its 32 zmm registers hold the accumulators) and 4 with AVX2 (eight
of its 16 ymm), dropping to 2 or 1 where the panel count is not a multiple. The vectors run along the panel's
16 columns: Wp's layout is the one prefill's kernel takes too, so the weights are stored once.

The model's function takes a symbolic number of rows (batch × seq: prefill and decode are one function), so
`with_decode` makes the function a branch on it: this schedule for up to DECODE_ROWS rows, GEMM's for more.
Each branch's parallel loop then gets its serial twin (parallel_gate.py) with MIN_PARALLEL_WEIGHTS.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pseudoformer.backends.tvm.guard import require_tvm
from pseudoformer.backends.tvm.packing import PANEL
from pseudoformer.backends.tvm.parallel_gate import MIN_WORK_ATTR

tvm = require_tvm()
from tvm import s_tir, tirx  # noqa: E402

DECODE_ROWS = 4  # rows up to which W is read once per call and each row re-reads it from L2, not GEMM's tiles
# Weights (elements) a call must multiply to split its panels between the cores: 256 KB of float32, the
# int4 kernel's 64 KB of codes stands for as many weights (nbits_schedule.MIN_PARALLEL_BYTES).
MIN_PARALLEL_WEIGHTS = 1 << 16


def panels_at_once(target: Any, panels: int) -> int:
    """P: accumulators of 16 lanes per step, from the target's vector registers, dividing the panel count."""
    has = tvm.target.codegen.target_has_features
    best = 8 if has("avx512f", target) else 4
    return math.gcd(best, panels)


def _extent(sch: Any, loop: Any) -> int | None:
    ext = sch.get(loop).extent
    return int(ext) if isinstance(ext, tirx.IntImm) else None


def rows_of(func: Any) -> Any:
    """The number of rows (x's leading extents) of a packed product: an int, or an int64 expression."""
    sch = s_tir.Schedule(func)
    *lead, _n, _c, _k = sch.get_loops(sch.get_sblock("packed_matmul"))
    rows: Any = 1
    for lp in lead:
        ext = sch.get(lp).extent
        rows = rows * int(ext) if isinstance(ext, tirx.IntImm) and isinstance(rows, int) else \
            (tirx.IntImm("int64", rows) if isinstance(rows, int) else rows) * tirx.Cast("int64", ext)
    return rows


def schedule_matvec(func: Any, target: Any, place_epilogue: Any) -> Any:
    """The Schedule of a packed product's PrimFunc for a few rows; `place_epilogue(sch, local, loop)` puts the
    write-back of the accumulators and what follows it under `loop` (schedule._place_epilogue)."""
    sch = s_tir.Schedule(func)
    main = sch.get_sblock("packed_matmul")
    _inline_others(sch, main)
    *lead, n, c, k = sch.get_loops(main)
    panels = _extent(sch, n)
    per = panels_at_once(target, panels) if panels else 1
    g, p = sch.split(n, [None, per])
    sch.reorder(g, *lead, k, p, c)
    local = sch.cache_write(main, 0, "global")  # a stack array of P × 16: LLVM keeps it in registers
    sch.reverse_compute_at(local, lead[-1] if lead else g, preserve_unit_loops=True)
    place_epilogue(sch, local, lead[-1] if lead else g)
    sch.parallel(g)
    sch.annotate(g, MIN_WORK_ATTR, MIN_PARALLEL_WEIGHTS)
    sch.vectorize(c)
    sch.unroll(p)
    sch.decompose_reduction(main, k)
    return sch


def _inline_others(sch: Any, main: Any) -> None:
    """Every block but the product inlined into its consumers where it can be (a transpose of x before, the
    unpack and the epilogue's stages after: what GEMM's schedule does with dlight's try_inline first)."""
    main_name = sch.get(main).name_hint
    progress = True
    while progress:
        progress = False
        for block in sch.get_child_blocks(sch.get_sblock("root")):
            if sch.get(block).name_hint == main_name:
                continue
            try:
                sch.compute_inline(block)
            except Exception:  # noqa: S112 (an output, or a reduction: it stays its own loop nest)
                continue
            progress = True
            break


def is_packed_product(func: Any) -> bool:
    """Whether `func` computes packing.packed_matmul (and what fused into it) on 16-column panels."""
    sch = s_tir.Schedule(func)
    try:
        block = sch.get_sblock("packed_matmul")
    except Exception:  # not ours: no such block
        return False
    loops = sch.get_loops(block)
    stmt = sch.get(block)
    return len(loops) >= 4 and _extent(sch, loops[-2]) == PANEL and len(stmt.reads) == 2 \
        and isinstance(stmt.body, tirx.BufferStore)


def with_decode(func: Any, gemm: Callable[[], Any], target: Any, place_epilogue: Any) -> Any:
    """The Schedule of a packed product: the decode schedule where the rows, known when compiling, are at most
    DECODE_ROWS; `gemm()`'s where more; a branch on them between the two where they are known only when run."""
    rows = rows_of(func)
    if isinstance(rows, int) and rows > DECODE_ROWS:
        return gemm()
    decode = schedule_matvec(func, target, place_epilogue)
    if isinstance(rows, int):
        return decode
    large_sch = gemm()
    if large_sch is None:
        return None
    small, large = decode.mod["main"].body.block, large_sch.mod["main"].body.block
    branch = tirx.IfThenElse(rows <= tirx.IntImm("int64", DECODE_ROWS), small.body, large.body)
    buffers = list(small.alloc_buffers)  # an intermediate both schedules kept is one Buffer, declared once
    buffers += [b for b in large.alloc_buffers if not any(b.same_as(a) for a in buffers)]
    root = s_tir.SBlock([], [], [], "root", branch, None, buffers)
    return s_tir.Schedule(large_sch.mod["main"].with_body(s_tir.SBlockRealize([], True, root)))
