"""The CPU benchmark script runs end to end on tiny configs and renders its tables.

Timings are never asserted: they depend on the machine and its load. What is checked is that every
variant ran, the tables and the JSON have their shape, and each variant's logits match eager.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_cpu.py"


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    out = tmp_path_factory.mktemp("bench")
    # A subprocess, as a user runs it: the script sets process-wide thread counts that must not leak
    # into the rest of the test session. The legacy exporter only: dynamo takes ~10 s per model even
    # at these sizes.
    cmd = [sys.executable, str(SCRIPT), "--quick", "--models", "gpt2,bert", "--seqs", "8,12", "--reps", "2",
           "--exporters", "legacy", "--profile", "--profile-reps", "1", "--json", str(out / "r.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout, json.loads((out / "r.json").read_text())


def test_table_renders_every_variant(quick_run: tuple[str, dict]) -> None:
    table, _ = quick_run
    assert "| model | seq | variant | median ms |" in table
    for model in ("gpt2", "bert"):
        for seq in (8, 12):
            for variant in ("**ours**", "torch-legacy[eager]", "eager"):
                assert any(line.startswith(f"| {model} | {seq} | {variant}") for line in table.splitlines()), \
                    (model, seq, variant)
    assert "| model | variant | total | op types |" in table
    assert "Targets:" in table
    assert "ORT profile, gpt2 seq 8, ours" in table


def test_json_has_raw_numbers_and_matching_logits(quick_run: tuple[str, dict]) -> None:
    _, data = quick_run
    assert set(data["models"]) == {"gpt2", "bert"}
    for model in data["models"].values():
        assert model["compile_s"]["ours"] > 0
        assert model["ops"]["ours"]["total"] == sum(model["ops"]["ours"]["histogram"].values())
        for seq in ("8", "12"):
            variants = model["seqs"][seq]["variants"]
            assert {"ours", "eager", "torch-legacy[eager]"} <= set(variants)
            for name, v in variants.items():
                assert len(v["samples_ms"]) == 2
                # Same weights everywhere: a variant that disagrees with eager measured something else.
                assert v["max_abs_diff_vs_eager"] < 1e-3, name
        assert model["profile"]["8"]["ours"]["ops"], "the profile found no kernels"
