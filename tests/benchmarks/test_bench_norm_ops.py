"""benchmarks/bench_norm_ops.py runs, checks both variants against float64, and prints its table.

No timing is asserted; a variant whose output is off the reference makes the script exit non-zero.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_norm_ops.py"


def test_table_has_a_row_per_length() -> None:
    cmd = [sys.executable, str(SCRIPT), "--seqs", "1", "5", "--blocks", "1", "--runs", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split("|")[1].strip() for r in rows] == ["1", "5"]
    assert all(r.rstrip(" |").endswith("×") for r in rows)


def test_unavailable_provider_is_one_clear_error() -> None:
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has CUDA, so --provider cuda is not an error here")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--provider", "cuda"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "has no CUDAExecutionProvider" in proc.stderr
    assert "Traceback" not in proc.stderr
