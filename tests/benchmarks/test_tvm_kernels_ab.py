"""benchmarks/tvm_kernels_ab.py on the tiny Llama: both lowerings build and decode the same logits, ours in
fewer VM calls and kernels, and the lowering table is the shipped one again afterwards. No time is asserted."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("tvm")
BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_the_ab_runs_both_lowerings_and_restores_the_table(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    sys.modules.pop("tvm_kernels_ab", None)
    import tvm_kernels_ab

    from pseudoformer.backends.tvm.lowerings import LOWERINGS
    from pseudoformer.ir.ops import Op

    before = dict(LOWERINGS._by_op)
    assert tvm_kernels_ab.main(["--shape", "tiny", "--blocks", "1", "--runs", "2", "--prompt", "8", "--past", "4"]) == 0
    assert LOWERINGS._by_op == before and Op.ATTENTION in LOWERINGS._by_op
    out = capsys.readouterr().out
    calls = {name: (int(a), int(b)) for name, a, b in re.findall(r"^(tvm|ours): (\d+) VM calls a step, (\d+) kernels",
                                                                  out, re.M)}
    assert calls["ours"][0] < calls["tvm"][0] and calls["ours"][1] < calls["tvm"][1], calls
    assert float(re.search(r"largest difference of the logits: (\S+)", out).group(1)) < 1e-3  # type: ignore[union-attr]
    assert "| ours |" in out and "| tvm |" in out
