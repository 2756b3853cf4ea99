"""benchmarks/tvm_cache_ab.py on the tiny Llama: the step in buffers and the concatenating one both generate,
the same greedy tokens (the script asserts it), and the table names both. No time is asserted."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("tvm")
BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_the_ab_generates_with_both_caches(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    sys.modules.pop("tvm_cache_ab", None)
    import tvm_cache_ab

    assert tvm_cache_ab.main(["--shape", "tiny", "--contender", "fp32", "--rounds", "1", "--prompt", "6",
                              "--new", "5"]) == 0
    out = capsys.readouterr().out
    assert "| buffers |" in out and "| concatenated |" in out and "buffers ÷ concatenated: per token" in out
