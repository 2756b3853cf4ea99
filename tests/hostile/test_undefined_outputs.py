"""Kind: a run whose answer is undefined, or that the machine cannot hold, is one message, never exit 0 or a
traceback.

Finite but extreme values (an ε of 0 under a norm, a config whose squares pass float32) gave NaN logits that `run`
wrote with exit 0; a MemoryError (a sparse 1 GiB checkpoint under `ulimit -v`) was reported as an internal error."""

from __future__ import annotations

from pathlib import Path

import pytest

from pseudoformer import cli
from tests.hostile.conftest import judge, run_cli


@pytest.mark.parametrize("backend", ["numpy", "onnx"])
def test_an_output_holding_nan_is_refused_and_not_written(backend: str, tmp_path: Path,
                                                          capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.alg"
    path.write_text("Algorithm: y ← f(x)\n  Input: x ∈ ℝ^{3}\n  Output: y ∈ ℝ^{3}\n  1 return y = x / x\n")
    r = run_cli(["run", path, "--backend", backend, "--input", "x=[[0.0, 1.0, 2.0]]", "-o", tmp_path / "y.npz"],
                capfd)
    judge(r, "the output y holds NaN")
    assert not (tmp_path / "y.npz").exists()


def test_running_out_of_memory_is_one_message(monkeypatch: pytest.MonkeyPatch,
                                              capfd: pytest.CaptureFixture[str]) -> None:
    def handler(args) -> int:  # noqa: ANN001
        raise MemoryError

    monkeypatch.setattr(cli, "_check", handler)
    judge(run_cli(["check", "models/gpt2.alg"], capfd), "error: out of memory")
