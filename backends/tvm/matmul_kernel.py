"""One float32 product by a packed weight as a stand-alone TVM function, for tests and benchmarks: the same TE
computation (packing.packed_matmul) and schedules as inside a model.

`build(n, k, target)` compiles y [1, M, N] = x [1, M, K] · W [K, N] with W packed (packing.pack), for symbolic M
(a model's functions: the decode and GEMM schedules behind a branch on M) or a given one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pseudoformer.backends.tvm.guard import require_tvm
from pseudoformer.backends.tvm.packing import PANEL, pack, packed_matmul
from pseudoformer.backends.tvm.schedule import schedule_gemm, schedule_passes

tvm = require_tvm()
from tvm import te, tirx  # noqa: E402
from tvm.s_tir import dlight as dl  # noqa: E402


def prim_func(n: int, k: int, rows: int | None = None) -> Any:
    """main(x, wp, y): x [1, M, K], wp [⌈N/16⌉, K, 16], y [1, M, 16·⌈N/16⌉]; M symbolic where rows is None."""
    def i64(d: int) -> Any:
        return tirx.IntImm("int64", d)

    m = tirx.Var("m", "int64") if rows is None else i64(rows)
    x = te.placeholder((i64(1), m, i64(k)), "float32", "x")
    wp = te.placeholder((i64(-(-n // PANEL)), i64(k), i64(PANEL)), "float32", "wp")
    return te.create_prim_func([x, wp, packed_matmul(x, wp)])


def scheduled(n: int, k: int, target: Any, rows: int | None = None, *, decode: bool = True) -> Any:
    """The IRModule of main scheduled as in a model; decode=False: GEMM's schedule whatever the rows (the
    schedule before the decode one, for comparison)."""
    mod = tvm.IRModule({"main": prim_func(n, k, rows)})
    passes = schedule_passes(target)
    if not decode:
        gemm = dl.ScheduleRule.from_callable("Gemm")(lambda f, t, _tunable: schedule_gemm(f, t))
        passes = [dl.ApplyDefaultSchedule(gemm), *passes[1:]]
    with target:
        return tvm.transform.Sequential(passes)(mod)


def build(n: int, k: int, target: Any, rows: int | None = None, *, decode: bool = True) -> Any:
    """The compiled main(x, wp, y) for `target` (a tvm Target)."""
    return tvm.compile(scheduled(n, k, target, rows, decode=decode), target=target)


def operands(n: int, k: int, rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x [1, rows, K], W [K, N], Wp packed) of random normal numbers."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, n)).astype(np.float32)
    return rng.standard_normal((1, rows, k)).astype(np.float32), w, pack(w, PANEL)
