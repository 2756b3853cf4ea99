"""bench_quant.py's speed part runs end to end on a tiny GPT-2, and its accuracy measures measure.

Timings are never asserted. The accuracy part needs onnxruntime's quantizer (onnx-ir, the bench extra),
so it is run by hand, not here; its measures are checked on arrays whose answers are known.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

from common.quant_variants import accuracy  # noqa: E402


def test_speed_part_times_every_variant_asked_for() -> None:
    cmd = [sys.executable, str(BENCH / "bench_quant.py"), "--quick", "--part", "speed",
           "--variants", "fp32;int4, level 4;int8, level 4"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "ms" not in line]
    assert sorted(r.split(" | ")[0].strip("| ") for r in rows) == ["fp32", "int4, level 4", "int8, level 4"]


def test_accuracy_measures() -> None:
    ref = np.array([[[0.0, 1.0, 2.0], [1.0, 3.0, 1.0]]])  # the second row reads the same reversed
    same = accuracy(ref, ref)
    assert same.rel_error == same.max_abs == same.kl == 0 and same.top1 == 1
    flipped = accuracy(ref[..., ::-1], ref)
    assert flipped.top1 == 0.5 and flipped.kl > 0 and flipped.max_abs == 2
    assert flipped.rel_error == pytest.approx(np.linalg.norm(ref[..., ::-1] - ref) / np.linalg.norm(ref))
