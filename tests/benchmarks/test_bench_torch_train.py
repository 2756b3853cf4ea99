"""benchmarks/bench_torch_train.py at tiny shapes: it runs and prints both variants with the machine's line."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from benchmarks.bench_torch_train import main  # noqa: E402


def test_quick_run_prints_both_variants(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick", "--steps", "1", "--batch", "2", "--seq", "8", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "load average" in out and "ours (train --backend torch)" in out and "HF + torch eager" in out
