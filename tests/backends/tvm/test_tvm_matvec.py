"""The decode schedule of float32 products by packed weights (backends/tvm/matvec_schedule.py): exact against
numpy in float64 (1e-4 relative) for odd K and N (not multiples of the 16-lane vector), at one row and a few
(the decode schedule) and at more (GEMM's), with the rows known when compiling or only when run; the branch
between the two schedules is in the function; the AVX2 code is exact too where the host has AVX-512."""

from __future__ import annotations

import numpy as np
import pytest
import tvm_util  # noqa: F401  (skips without TVM)

from pseudoformer.backends.tvm import matmul_kernel as mk
from pseudoformer.backends.tvm.build import make_target
from pseudoformer.backends.tvm.matvec_schedule import DECODE_ROWS, MIN_PARALLEL_WEIGHTS, panels_at_once

tvm = pytest.importorskip("tvm")

# (N, K): odd both, a panel and a bit, SmolLM2's k/v shape (12 panels), and one over the parallel threshold
SHAPES = [(37, 29), (17, 130), (192, 576), (200, 333)]


def _run(lib: object, n: int, k: int, m: int, seed: int) -> float:
    x, w, wp = mk.operands(n, k, m, seed)
    dev = tvm.cpu()
    y = tvm.runtime.tensor(np.zeros((1, m, wp.shape[0] * wp.shape[2]), np.float32), dev)
    lib["main"](tvm.runtime.tensor(x, dev), tvm.runtime.tensor(wp, dev), y)  # type: ignore[index]
    want = x.astype(np.float64) @ w.astype(np.float64)
    return float(np.abs(y.numpy()[..., :n] - want).max() / np.abs(want).max())


@pytest.mark.parametrize(("n", "k"), SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
def test_symbolic_rows_are_exact_on_both_branches(n: int, k: int) -> None:
    lib = mk.build(n, k, make_target("llvm"))
    for m in (1, 2, DECODE_ROWS, DECODE_ROWS + 1, 13):  # decode schedule up to DECODE_ROWS, then GEMM's
        assert _run(lib, n, k, m, seed=m) <= 1e-4, m


@pytest.mark.parametrize("rows", [1, 3, 7])
def test_rows_known_when_compiling_are_exact(rows: int) -> None:
    lib = mk.build(200, 333, make_target("llvm"), rows)
    assert _run(lib, 200, 333, rows, seed=rows) <= 1e-4


def test_one_row_known_when_compiling_takes_the_decode_schedule() -> None:
    script = mk.scheduled(576, 576, make_target("llvm"), rows=1).script()
    assert "a_pad" not in script and "x_pad" not in script  # GEMM pads x to its six-row tile; decode reads x
    assert "T.parallel(" in script and f">= T.int64({MIN_PARALLEL_WEIGHTS})" not in script  # 331776 weights


def test_symbolic_rows_branch_between_the_schedules() -> None:
    script = mk.scheduled(576, 576, make_target("llvm")).script()
    assert f'if T.Cast("int64", m) <= T.int64({DECODE_ROWS}):' in script
    assert "x_pad" in script  # the GEMM branch, for prefill
    assert f">= T.int64({MIN_PARALLEL_WEIGHTS})" in script  # the decode branch's parallel loop has its serial twin


def test_panels_at_a_time_follow_the_vector_registers() -> None:
    avx2 = tvm.target.Target({"kind": "llvm", "mcpu": "haswell"})
    avx512 = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"})
    assert panels_at_once(avx2, 36) == 4 and panels_at_once(avx512, 3072) == 8
    assert panels_at_once(avx512, 36) == 4 and panels_at_once(avx2, 13) == 1


def test_the_avx2_code_is_exact() -> None:
    """Haswell's instructions run on every CPU this project targets (AVX2 Zen 3, AVX-512 Xeons)."""
    lib = mk.build(200, 333, tvm.target.Target({"kind": "llvm", "mcpu": "haswell"}))
    for m in (1, 3, 8):
        assert _run(lib, 200, 333, m, seed=10 + m) <= 1e-4, m
