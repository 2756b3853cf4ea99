"""benchmarks/decode_overhead.py on a tiny Llama: the generator's loop profiled, each step's kernels within its run."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.parametrize("standard", [False, True])
def test_a_tiny_llamas_step_is_split_into_kernels_run_and_the_rest(capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   standard: bool) -> None:
    monkeypatch.syspath_prepend(str(BENCH))  # as the script runs: its folder first, `common` found there
    main = importlib.import_module("decode_overhead").main
    assert main(["--quick", "--prompt", "8", "--new", "5", "--rounds", "1", "--threads", "1",
                 *(["--standard"] if standard else [])]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 3 and cells[1].replace(".", "").isdigit():
            rows[cells[0]] = float(cells[1])
    assert 0 < rows["kernels"] <= rows["onnxruntime run"]
    assert rows["outside the kernels (wall − kernels)"] == pytest.approx(rows["wall (the loop)"] - rows["kernels"],
                                                                          abs=2e-3)
