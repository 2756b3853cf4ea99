"""benchmarks/decode_overhead.py on a tiny Llama: the generator's loop profiled, each step's kernels within its run."""

from __future__ import annotations

import pytest

from benchmarks.decode_overhead import main


@pytest.mark.parametrize("standard", [False, True])
def test_a_tiny_llamas_step_is_split_into_kernels_run_and_the_rest(capsys: pytest.CaptureFixture[str],
                                                                   standard: bool) -> None:
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
