"""benchmarks/bench_train.py runs end to end on tiny shapes: every variant of both workloads (GPT-2, LoRA on
<<<<<<< HEAD
a Llama), ours with and without the short ONNX forms, without one pass of the training step (--without) and with
the update over whole tensors, the table and
the JSON, and every variant starts from the same loss (the same weights and batch); profile_train_vs_torch.py
=======
a Llama), ours with and without the short ONNX forms and with the update over whole tensors, ours on the torch
backend eager and under torch.compile, the table and the JSON, and every variant starts from the same loss (the
same weights and batch); profile_train_vs_torch.py
>>>>>>> torchcompile
prints its table of components, bench_update_pieces.py its table of piece sizes, and bench_train_rss.py
both peaks end to end and ours phase by phase. Timings and sizes are never
asserted: they depend on the machine and its load."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_train.py"


def test_the_training_benchmark_runs_and_both_sides_start_from_the_same_loss(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--plain", "--whole-update", "--without",
                           "batched_weight_gradient", "--torch-backend", "--json", str(out),
                           "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "| workload | variant | ms/step (median) | min | tokens/s | GFLOP/s | of ceiling | peak RSS MiB |" \
        in proc.stdout
    assert proc.stdout.count("Targets, ") == 2
    targets = [line for line in proc.stdout.splitlines() if line.startswith("Targets, ")]
    assert all("ours, torch backend " in line for line in targets)
    data = json.loads(out.read_text())
    assert data["ceiling_gflops"] > 0
    rows = {(r["workload"], r["variant"]): r for r in data["rows"]}
    variants = ("ours (onnxruntime)", "ours, plain lowering", "ours, without batched_weight_gradient",
                "ours, whole-tensor update", "ours, torch backend", "torch eager")
    assert set(rows) == {(w, v) for w in ("gpt2", "smollm2") for v in variants}
    for w in ("gpt2", "smollm2"):
        eager = rows[(w, "torch eager")]
        for v in variants:
            r = rows[(w, v)]
            assert abs(r["first_loss"] - eager["first_loss"]) <= 1e-4 * abs(eager["first_loss"]), (w, v)
            assert r["peak_rss_mib"] > 0 and r["ms_per_step"] > 0


def test_the_training_benchmark_times_ours_under_torch_compile(tmp_path: Path) -> None:
    """The compiled variants on their own, with and without our inductor rules (one workload, no peak-RSS
    children: each would compile again)."""
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--workloads", "gpt2", "--no-rss",
                           "--torch-backend-compile", "--torch-backend-compile-plain", "--json", str(out),
                           "--workdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "ours, torch backend + torch.compile " in next(
        line for line in proc.stdout.splitlines() if line.startswith("Targets, "))
    rows = {r["variant"]: r for r in json.loads(out.read_text())["rows"]}
    eager = rows["torch eager"]
    for variant in ("ours, torch backend + torch.compile", "ours, torch.compile without our inductor rules"):
        compiled = rows[variant]
        assert abs(compiled["first_loss"] - eager["first_loss"]) <= 1e-4 * abs(eager["first_loss"])
        assert compiled["build_s"] > 0 and compiled["ms_per_step"] > 0  # its first step (the compile) timed apart
    assert "First step (its compile): gpt2, ours, torch backend + torch.compile: " in proc.stdout


def test_the_side_by_side_profile_prints_every_component(tmp_path: Path) -> None:
    script = SCRIPT.parent / "profile_train_vs_torch.py"
    proc = subprocess.run([sys.executable, str(script), "--quick", "--batch", "2", "--seq", "16", "--steps", "2",
                           "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:3] for line in proc.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| component")}
    assert set(rows) == {"matrix products", "attention kernels", "vocabulary-sized, other", "optimizer",
                         "everything else", "sum of kernels", "step (wall, median)"}
    ours, torch = (float(v) for v in rows["step (wall, median)"])
    assert ours > 0 and torch > 0 and float(rows["matrix products"][1]) > 0


def test_the_update_pieces_benchmark_runs(tmp_path: Path) -> None:
    script = SCRIPT.parent / "bench_update_pieces.py"
    proc = subprocess.run([sys.executable, str(script), "--quick", "--chunks", "0,64", "--runs", "1",
                           "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [line.split(" | ") for line in proc.stdout.splitlines() if line.startswith("| whole") or
            line.startswith("| 64 ")]
    assert len(rows) == 2 and int(rows[1][1]) > int(rows[0][1])  # the pieces are more nodes


def test_the_training_profile_lists_the_tensors_live_at_the_peak(tmp_path: Path) -> None:
    script = SCRIPT.with_name("profile_train.py")
    proc = subprocess.run([sys.executable, str(script), "--quick", "--live", "--steps", "1", "--seq", "16",
                           "--batch", "2", "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    peak = proc.stdout.split("static peak of intermediates ", 1)[1].splitlines()
    assert "MiB, at " in peak[0] and len(peak) > 5  # the node where, then the tensors live there


def test_the_end_to_end_memory_benchmark_runs_both_sides_and_its_phases(tmp_path: Path) -> None:
    script = SCRIPT.with_name("bench_train_rss.py")
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, str(script), "--quick", "--json", str(out)], capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads(out.read_text())
    assert set(data["peak_mib"]) == {"ours", "torch"} and all(v > 0 for v in data["peak_mib"].values())
    assert data["ratio"] == data["peak_mib"]["ours"] / data["peak_mib"]["torch"]
    proc = subprocess.run([sys.executable, str(script), "--quick", "--phases"], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    phases = [line.split(" | ")[0].strip("| ") for line in proc.stdout.splitlines() if line.startswith("| ")]
    for phase in ("load the model and its weights", "compile the step graph", "make the sessions", "a step",
                  "save"):
        assert phase in phases, phases
