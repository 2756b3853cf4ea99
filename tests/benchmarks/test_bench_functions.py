"""benchmarks/bench_functions.py runs on a tiny GPT-2, finds both models' outputs identical and prints its tables.

No timing is asserted; outputs that differ between the flat model and the one with functions make the
script exit non-zero.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_functions.py"


def test_quick_run_prints_both_variants() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout
    assert "outputs bit for bit identical: yes" in out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    assert rows["functions"].split("|")[3].strip() == "5"  # layers, MHAttention, Attention, layer_norm, GELU_tanh
    assert rows["flat"].split("|")[3].strip() == "0"
    assert "session creation" in rows and "run, seq 16" in rows
