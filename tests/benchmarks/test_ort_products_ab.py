"""benchmarks/ort_products_ab.py at tiny sizes: every formulation runs, gives numpy's product (the script asserts
it), and runs on onnxruntime as its row says: the step's weight gradient as FusedMatMul(transA), the rows
transposed first as a Transpose and a MatMul. No time is asserted."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_every_formulation_runs_as_its_row_says(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    sys.modules.pop("ort_products_ab", None)
    import ort_products_ab

    assert ort_products_ab.main(["--quick", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1] for line in out.splitlines()
            if line.startswith("| ") and not line.startswith("| formulation")}
    assert rows["now: Transpose+MatMul → FusedMatMul(transA)"] == "Flatten Flatten FusedMatMul(transA)"
    assert rows["Transpose(a,[2,0,1]) → Flatten → MatMul"] == "Transpose Flatten Flatten MatMul"
    assert rows["Gemm(transA)"] == "Flatten Flatten Gemm(transA)"
    assert rows["now: MatMul(dY, Transpose W) → FusedMatMul(transB)"] == "FusedMatMul(transB)"
    assert out.count("### weight gradient") == 2 and "### logits" in out and out.count("### input gradient") == 2
