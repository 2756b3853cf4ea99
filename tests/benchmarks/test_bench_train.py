"""benchmarks/bench_train.py runs end to end on tiny shapes: every variant of both workloads, the table and
the JSON, and ours and torch start from the same loss (the same weights and batch). Timings are never
asserted: they depend on the machine and its load."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_train.py"


def test_the_training_benchmark_runs_and_both_sides_start_from_the_same_loss(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(out)], capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "| workload | variant | ms/step | tokens/s | GFLOP/s | of ceiling | peak RSS MiB | first loss |" in proc.stdout
    assert proc.stdout.count("Targets, ") == 2
    data = json.loads(out.read_text())
    assert data["ceiling_gflops"] > 0
    rows = {(r["workload"], r["variant"]): r for r in data["rows"]}
    assert set(rows) == {(w, v) for w in ("gpt2", "smollm2") for v in ("ours (onnxruntime)", "torch eager")}
    for w in ("gpt2", "smollm2"):
        ours, eager = rows[(w, "ours (onnxruntime)")], rows[(w, "torch eager")]
        assert abs(ours["first_loss"] - eager["first_loss"]) <= 1e-4 * abs(eager["first_loss"])
        assert ours["peak_rss_mib"] > 0 and eager["peak_rss_mib"] > 0 and ours["ms_per_step"] > 0
