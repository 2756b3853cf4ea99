"""benchmarks/gpu_int4.py, the int4 kernels on TVM's cuda target: scheduled by dlight and compiled to CUDA
here (no GPU needed), and run against the reference where there is a GPU and a TVM with its runtime."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tvm_util  # noqa: F401  (skips without TVM)

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"
sys.path.insert(0, str(BENCH))

import gpu_int4  # noqa: E402


def test_every_product_schedules_and_compiles_for_cuda() -> None:
    assert gpu_int4.check() == list(gpu_int4.PRODUCTS)


@pytest.mark.skipif(gpu_int4.no_gpu_reason() is not None, reason=f"gpu_int4.py needs a GPU: {gpu_int4.no_gpu_reason()}")
def test_the_gpu_script_runs_and_checks_its_kernels() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "gpu_int4.py")], capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "unembedding" in proc.stdout and "max relative error" in proc.stdout
