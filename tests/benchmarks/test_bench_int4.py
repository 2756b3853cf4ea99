"""bench_int4.py runs end to end on a tiny Llama and two small products: each part prints its table, with
a row per shape and product, the floor beside the model's. Timings are never asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tvm.relax", reason="bench_int4 times the TVM backend: pip install pseudoformer[tvm]")

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_quick_run_prints_both_tables() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "bench_int4.py"), "--quick"], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [line.split(" | ")[0].strip("| ") for line in proc.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| shape") and not line.startswith("| product")]
    assert rows == ["small", "tall", "tiny", "tiny", "tiny"], proc.stdout
    assert "streaming read bandwidth" in proc.stdout and "load average" in proc.stdout
    tiny = [line.split(" | ") for line in proc.stdout.splitlines() if line.startswith("| tiny |")]
    # a row per contender (TVM with float32 and with int8 activations, ORT), each per-token time against the floor
    assert [cells[3] for cells in tiny] == ["tvm", "tvm8", "ort"], proc.stdout
    assert all(cells[4].endswith("×)") for cells in tiny), proc.stdout


def test_quick_fp32_run_prints_both_tables() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "bench_int4.py"), "--quick", "--dtype", "fp32", "--contenders",
                           "tvm", "tvm-gemm", "ort"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    products = [line.split(" | ") for line in proc.stdout.splitlines() if line.startswith(("| small |", "| odd |"))]
    assert [cells[0].strip("| ") for cells in products] == ["small", "odd"], proc.stdout
    assert all(cell.count("GB/s") == 1 for cells in products for cell in cells[3:]), proc.stdout
    tiny = [line.split(" | ") for line in proc.stdout.splitlines() if line.startswith("| tiny |")]
    # float32: our decode schedule, the GEMM schedule before it, ORT; each against the floor
    assert sorted(cells[3] for cells in tiny) == ["ort", "tvm", "tvm-gemm"], proc.stdout
    assert {cells[1] for cells in tiny} == {"1 MB"} and all(cells[4].endswith("×)") for cells in tiny), proc.stdout
