"""The pieces bench_cpu.py is made of, imported on their own: the interleaved timing, the stage clock of
--compile-only, and the command line's defaults and errors.

No wall-clock time is asserted: the timing code runs on a fake clock that the timed calls advance.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def bench_module(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A module beside the scripts, imported as a script there imports it (its folder first on the path)."""
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module(name)


class FakeClock:
    """perf_counter and sleep for a module's `time`: only the timed calls move it, by what they say."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)

    def namespace(self) -> SimpleNamespace:
        return SimpleNamespace(perf_counter=self.perf_counter, sleep=self.sleep)


def variants(clock: FakeClock, seconds: dict[str, float], log: list[str]) -> dict[str, Callable[[], None]]:
    def call(name: str) -> None:
        log.append(name)
        clock.now += seconds[name]

    return {name: (lambda n=name: call(n)) for name in seconds}


def test_round_robin_warms_up_rotates_and_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    timing = bench_module("common.harness", monkeypatch)
    clock = FakeClock()
    monkeypatch.setattr(timing, "time", clock.namespace())
    log: list[str] = []
    times = timing.round_robin(variants(clock, {"a": 1.0, "b": 2.0, "c": 4.0}, log), reps=4, warmup=2, gap_s=0.5)
    assert log[:6] == ["a", "b", "c"] * 2
    assert log[6:] == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]
    assert times == {"a": [1.0] * 4, "b": [2.0] * 4, "c": [4.0] * 4}
    assert clock.sleeps == [0.5] * 12


def test_round_robin_fixed_order_and_one_variant_without_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    timing = bench_module("common.harness", monkeypatch)
    clock = FakeClock()
    monkeypatch.setattr(timing, "time", clock.namespace())
    log: list[str] = []
    timing.round_robin(variants(clock, {"tvm": 1.0, "ort": 1.0}, log), reps=3, gap_s=0.3, rotate=False)
    assert log == ["tvm", "ort"] * 4
    clock.sleeps.clear()
    alone = timing.round_robin(variants(clock, {"tvm": 3.0}, []), reps=2, gap_s=0.3)
    assert alone == {"tvm": [3.0, 3.0]}
    assert clock.sleeps == []


def test_measure_reports_milliseconds_of_each_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    timing = bench_module("common.harness", monkeypatch)
    measure = bench_module("common.cpu_measure", monkeypatch)
    clock = FakeClock()
    monkeypatch.setattr(timing, "time", clock.namespace())
    seen: list[object] = []

    def runner(ms: float) -> Callable[[object], None]:
        def run(x: object) -> None:
            seen.append(x)
            clock.now += ms / 1e3

        return run

    times = measure.measure({"ours": runner(2.0), "eager": runner(5.0)}, "x", warmup=1, reps=2, gap_s=0.0)
    assert times == {"ours": [pytest.approx(2.0)] * 2, "eager": [pytest.approx(5.0)] * 2}
    assert seen == ["x"] * 6


def test_stage_clock_counts_exclusive_time(monkeypatch: pytest.MonkeyPatch) -> None:
    stages = bench_module("common.cpu_compile_time", monkeypatch)
    clock = FakeClock()
    monkeypatch.setattr(stages, "time", clock.namespace())
    sc = stages.StageClock()

    def inner() -> None:
        clock.now += 2.0

    timed_inner = sc.wrap(inner, "inner")

    def outer() -> None:
        clock.now += 1.0
        timed_inner()
        timed_inner()
        clock.now += 0.5

    sc.wrap(outer, "outer")()
    assert sc.seconds == {"inner": 4.0, "outer": 1.5}


def test_stage_clock_wraps_the_compiler_and_restores_it(monkeypatch: pytest.MonkeyPatch) -> None:
    stages = bench_module("common.cpu_compile_time", monkeypatch)
    model = importlib.import_module("pseudoformer.model")

    loader = importlib.import_module("pseudoformer.weights.checkpoint")  # where a HF directory is mapped
    before, mapping = model.load_program, loader.map_hf_checkpoint
    sc = stages.StageClock()
    with sc.installed():
        assert model.load_program is not before and loader.map_hf_checkpoint is not mapping
    assert model.load_program is before and loader.map_hf_checkpoint is mapping


def test_command_line_defaults_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    cli = bench_module("bench_cpu", monkeypatch)
    quick = cli.parse_args(["--quick"])
    assert (quick.seqs, quick.reps, quick.warmup, quick.profile_reps, quick.warm_tools) == ([16, 32], 3, 1, 2, False)
    full = cli.parse_args(["--models", "gpt2", "--gap-ms", "5"])
    assert (full.models, full.seqs, full.reps, full.gap_ms, full.warm_tools) == (["gpt2"], [128, 512], 15, 5.0, True)
    for bad in (["--models", "llama"], ["--exporters", "jit"], ["--reps", "0"]):
        with pytest.raises(SystemExit) as e:
            cli.parse_args(bad)
        assert e.value.code == 2


def test_compile_only_times_ours_by_stage_in_fresh_processes(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    cmd = [sys.executable, str(BENCH / "bench_cpu.py"), "--quick", "--compile-only", "--compile-reps", "1",
           "--models", "gpt2", "--exporters", "legacy", "--json", str(tmp_path / "c.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for row in ("| parse .alg |", "| passes (-O2) |", "| lower to ONNX |", "| **ours total** |",
                "| **torch-legacy total** |", "| ours / torch-legacy (of medians; median of per-round ratios) |"):
        assert row in proc.stdout, row
    (model,) = json.loads((tmp_path / "c.json").read_text())["compile"]
    (row,) = model["rounds"]
    assert model["fresh_processes"] is True
    assert sum(row["stages"].values()) == pytest.approx(row["ours"])
    assert row["torch-legacy"] > 0
