"""CPU schedules for the PrimFuncs that legalization and fusion leave (dlight's rules on GPUs).

TVM 0.27's default CPU pipeline leaves matrix products unscheduled (dlight has no CPU matmul rule)
and meta_schedule crashes in this wheel, so every PrimFunc gets one of these hand-written rules:

* Matmul: one multiply-accumulate reduction, S…S R, with injective prologue and epilogue blocks
  (bias, GELU, residual, the mask of causal attention). The register-blocked kernel of BLAS
  libraries: a tile of MR rows × 16 columns of C lives in registers (12 AVX2 registers for MR=6)
  while k runs, each step one broadcast of A and two vector loads of B per six FMAs. Rows and,
  where needed, columns are padded (pad_einsum) so that the kernel has no bounds checks, which
  would otherwise keep the accumulators in memory. Tiles are taken column panel by column panel,
  so one panel of B stays in cache across all rows, and panels (or heads, for attention's batched
  products) run in parallel. The epilogue runs on each tile as it is written back.
  Where the weight is packed, calls of a few rows (decoding) take matvec_schedule.py's kernel instead.
* Rows: softmax and layer norm, parallel over rows, each row's stages together, inner loops
  left for LLVM to vectorise (dlight's CPU rule, which splits them, is the fallback).
* The block-quantized product: nbits_schedule.py.
* Everything else: parallel over the outer loops, vectorised innermost where its extent is known.

Each parallel loop then gets a serial twin that runs when its work is small (parallel_gate.py).
"""

from __future__ import annotations

import os
from typing import Any

from pseudoformer.backends.tvm.guard import require_tvm
from pseudoformer.backends.tvm.matvec_schedule import is_packed_product, with_decode
from pseudoformer.backends.tvm.nbits_schedule import schedule_nbits
from pseudoformer.backends.tvm.packing import PANEL
from pseudoformer.backends.tvm.parallel_gate import serial_when_small

tvm = require_tvm()
from tvm import s_tir, tirx  # noqa: E402
from tvm.s_tir import dlight as dl  # noqa: E402
from tvm.s_tir.dlight.analysis import normalize_prim_func  # noqa: E402
from tvm.s_tir.dlight.base import try_inline  # noqa: E402

_DEBUG = bool(os.environ.get("PSEUDOFORMER_TVM_DEBUG"))
MR = 6  # rows of the register tile: 6 × 2 vectors of accumulators + 2 of B + 1 broadcast ≤ 16 ymm
VEC = 8  # float32 lanes of the narrowest vector the CPU targets have (AVX2)


def _extent(sch: Any, loop: Any) -> int | None:
    ext = sch.get(loop).extent
    return int(ext) if isinstance(ext, tirx.IntImm) else None


def _try(f: Any, *args: Any) -> bool:
    try:
        f(*args)
    except Exception as e:  # a schedule primitive refusing: the block keeps its default code, still correct
        if _DEBUG:
            print(f"schedule: {getattr(f, '__name__', f)} refused: {str(e).splitlines()[-1][:300]}")
        return False
    return True


# The PrimFunc the rules last looked at, its untouched Schedule and its blocks: the rules are tried in turn
# on each PrimFunc, and normalize_prim_func (a third of the schedule pass's time) need run only once for them.
_last: list[Any] = []


def _analysed(func: Any) -> tuple[Any, list[Any] | None]:
    """The untouched Schedule of `func` and its normalized blocks (None where it has no normal form), once."""
    if not (_last and _last[0].same_as(func)):
        sch = s_tir.Schedule(func)
        _last[:] = [func, sch, normalize_prim_func(sch)]
    return _last[1], _last[2]


def _cpu_blocks(func: Any, target: Any) -> tuple[Any, list[Any]] | None:
    """(schedule, blocks) of a PrimFunc for an LLVM target, or None where our CPU rules don't apply.
    The schedule is a copy, for the rule to change: the blocks' and loops' handles are valid in it."""
    if not isinstance(func, tirx.PrimFunc) or target.kind.name != "llvm":
        return None
    sch, blocks = _analysed(func)
    return None if blocks is None else (sch.copy(), blocks)


_DL_REDUCTION = dl.cpu.Reduction()


def _reduction(func: Any, target: Any, tunable: bool) -> Any:
    """dlight's CPU reduction rule, asked only where it can apply: it normalizes the PrimFunc again, and
    declines any with fewer than two blocks or no reduction (its own first checks, on the same blocks)."""
    if not isinstance(func, tirx.PrimFunc) or target.kind.name != "llvm":
        return None
    blocks = _analysed(func)[1]
    if blocks is None or len(blocks) < 2 or all(b.is_injective() for b in blocks):
        return None
    return _DL_REDUCTION.apply(func, target, tunable)


def _matmul(func: Any, target: Any, _tunable: bool) -> Any:
    """GEMM's schedule, and for a product by a packed weight the decode one (matvec_schedule.py) beside it."""
    if not isinstance(func, tirx.PrimFunc) or target.kind.name != "llvm":
        return None
    if is_packed_product(func):
        return with_decode(func, lambda: schedule_gemm(func, target), target, _place_epilogue)
    return schedule_gemm(func, target)


def schedule_gemm(func: Any, target: Any) -> Any:
    """The register-blocked GEMM schedule of a product's PrimFunc, for any number of rows; None if not one."""
    if (found := _cpu_blocks(func, target)) is None:
        return None
    sch, blocks = found
    reductions = [b for b in blocks if not b.is_injective()]
    kinds = reductions[0].dom_kind() if len(reductions) == 1 else ""
    if not kinds.endswith("SSR") or kinds.count("R") != 1:
        return None
    main = reductions[0]
    stmt = sch.get(main.block_rv)
    if len(stmt.reads) != 2 or len(stmt.writes) != 1 or not isinstance(stmt.body, tirx.BufferStore):
        return None  # not C += A·B
    # Prologue blocks (masks, transposes) fold into their consumers; what cannot stays as it is.
    try_inline(sch, [b for b in blocks if b is not main])
    loops = sch.get_loops(main.block_rv)
    packed = stmt.name_hint == "packed_matmul" and _extent(sch, loops[-2]) == PANEL
    # Cp[..., i, n, c] (packed) or C[..., i, j]: pad i to whole tiles, and j to whole panels.
    n_lead = len(loops) - (4 if packed else 3)
    j_ext = _extent(sch, loops[-2])
    pads = [1] * n_lead + [MR] + ([1, 1] if packed else [1 if j_ext and j_ext % PANEL == 0 else PANEL]) + [1]
    if any(p > 1 for p in pads):
        sch.pad_einsum(main.block_rv, pads)
    for producer in sch.get_producers(main.block_rv):
        _vectorize_inner(sch, producer)
    # The copy out of the padded C and the epilogue become one block.
    pad_producers = {sch.get(b).name_hint for b in sch.get_producers(main.block_rv)}
    others = [b for b in normalize_prim_func(sch) or []
              if b.name != stmt.name_hint and b.name not in pad_producers]
    try_inline(sch, others)
    loops = sch.get_loops(main.block_rv)
    if packed:
        *lead, i, jo, ji, k = loops
    else:
        *lead, i, j, k = loops
        jo, ji = sch.split(j, [None, PANEL])
    io, ii = sch.split(i, [None, MR])
    static = [lp for lp in lead if _extent(sch, lp) is not None]
    outer = static[:1] if static else ([jo] if _extent(sch, jo) is not None else [])
    sch.reorder(*outer, *[lp for lp in [*lead, jo] if lp not in outer], io, k, ii, ji)
    if outer:
        sch.parallel(outer[0])
    # "global", not "local": TVM puts small constant-size global buffers on the stack, where LLVM keeps
    # them in registers; a "local" one comes from TVMBackendAllocWorkspace, which LLVM must assume
    # may alias the inputs, and every FMA then stores its accumulator.
    local = sch.cache_write(main.block_rv, 0, "global")
    sch.reverse_compute_at(local, io, preserve_unit_loops=True)
    _place_epilogue(sch, local, io, packed)
    sch.vectorize(ji)
    sch.unroll(ii)
    sch.decompose_reduction(main.block_rv, k)
    return sch


def _place_epilogue(sch: Any, local: Any, loop: Any, packed: bool = True) -> None:
    """The write-back of a product's accumulators (`local`) and the blocks after it: inlined into it, or
    computed under `loop` tile by tile, or (where neither takes) each a parallel loop nest of its own."""
    placed: set[str] = set()
    while pending := [b for b in sch.get_consumers(local) if sch.get(b).name_hint not in placed]:
        b = pending[0]
        if _try(sch.reverse_compute_inline, b):
            continue  # its consumers are the write-back's now
        placed.add(sch.get(b).name_hint)
        # Split C's columns into panels first: then the epilogue's reads of Cp[.., j/16, j%16]
        # are affine in the panel loops, and it can run on each tile as the tile is written.
        last = sch.get_loops(b)[-1]
        if packed and _extent(sch, last) is not None and _extent(sch, last) % PANEL == 0:
            _try(sch.transform_block_layout, b, lambda *v: (*v[:-1], v[-1] // PANEL, v[-1] % PANEL))
        if not _try(sch.reverse_compute_at, b, loop, True):
            _parallel_outer(sch, b)
    for b in [local, *sch.get_consumers(local)]:
        _vectorize_inner(sch, b)


def _vectorize_inner(sch: Any, block: Any) -> None:
    """Vectorise a block's innermost loop when its extent is a known multiple of the vector width."""
    loops = sch.get_loops(block)
    if not loops:
        return
    ext = _extent(sch, loops[-1])
    if ext is None or ext < VEC:
        return
    if ext % (2 * VEC) == 0:
        _, inner = sch.split(loops[-1], [None, 2 * VEC])
        _try(sch.vectorize, inner)
    elif ext % VEC == 0:
        _, inner = sch.split(loops[-1], [None, VEC])
        _try(sch.vectorize, inner)


def _parallel_outer(sch: Any, block: Any) -> None:
    """Parallel over a block's leading loops, fused when there are several (batch and seq, say)."""
    loops = sch.get_loops(block)
    if len(loops) > 2:
        _try(sch.parallel, sch.fuse(*loops[:2]))
    elif loops:
        _try(sch.parallel, loops[0])


def _rows(func: Any, target: Any, _tunable: bool) -> Any:
    """Softmax, layer norm: reductions over a row followed by an elementwise pass over it.

    Parallel over rows, every stage of a row computed under the row loop, inner loops left whole:
    LLVM vectorises them itself. dlight's CPU rule splits them by the vector width, which for a
    row of symbolic length ("seq") leaves a bounds check in every vector, and runs 3.5× slower.
    """
    if (found := _cpu_blocks(func, target)) is None:
        return None
    sch, blocks = found
    if len(blocks) < 2 or not blocks[-1].is_injective():
        return None
    if all(b.is_injective() for b in blocks):
        return None
    kinds = [b.dom_kind() for b in blocks]
    leading = min(len(k) - len(k.lstrip("S")) for k in kinds)
    last_loops = sch.get_loops(blocks[-1].block_rv)
    if leading < 1 or leading >= len(last_loops):
        return None
    row = sch.fuse(*last_loops[:leading]) if leading > 1 else last_loops[0]
    try:
        sch.parallel(row)
        for b in reversed(blocks[:-1]):
            sch.compute_at(b.block_rv, row, preserve_unit_loops=True)
    except Exception:  # not one row per stage: leave it to dlight's rule
        return None
    return sch


def _fallback(func: Any, target: Any, _tunable: bool) -> Any:
    """Any other PrimFunc: inline what can be, then parallel outer loops and vector inner ones."""
    if (found := _cpu_blocks(func, target)) is None:
        return None
    sch, blocks = found
    blocks = try_inline(sch, list(blocks))
    for b in blocks:
        loops = sch.get_loops(b.block_rv)
        spatial = [lp for lp, it in zip(loops, b.iters, strict=False) if it.kind == "S"]
        if b.is_injective():
            _vectorize_inner(sch, b.block_rv)
        if spatial and loops and spatial[0] == loops[0]:
            _try(sch.parallel, loops[0])
    return sch


def schedule_passes(target: Any) -> list[Any]:
    """Passes that schedule every PrimFunc of a module for `target`."""
    if target.kind.name == "cuda":
        return [dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                        dl.gpu.GeneralReduction(), dl.gpu.Fallback())]
    matmul = dl.ScheduleRule.from_callable("Matmul")(_matmul)
    rows = dl.ScheduleRule.from_callable("Rows")(_rows)
    reduction = dl.ScheduleRule.from_callable("Reduction")(_reduction)
    fallback = dl.ScheduleRule.from_callable("Fallback")(_fallback)
    nbits = dl.ScheduleRule.from_callable("NBits")(schedule_nbits)
    # then each parallel loop runs serially where its work is small (a decode step's: parallel_gate.py)
    return [dl.ApplyDefaultSchedule(nbits, matmul, rows, reduction, fallback), serial_when_small,
            tirx.transform.ConvertSSA()]  # the twins' loop and block variables made distinct
