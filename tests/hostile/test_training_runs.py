"""Kind: a run that goes wrong leaves the last good checkpoint, and what a run is told is what it does.

A learning rate that sends θ to ±∞ within a step whose loss was still finite wrote a checkpoint of non-finite
weights with exit 0, over a good one; train took --max-nodes and --allow-nonfinite and ignored them; --lr 1e39
(past float32) and 1e-50 (below it) were accepted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.hostile.conftest import judge, run_cli

LOSS = str(Path(__file__).resolve().parents[1] / "training" / "gpt2_loss.alg")
TINY = ["-D", "L=1", "-D", "H=2", "-D", "d_e=16", "-D", "d_mlp=32", "-D", "d_attn=8", "-D", "d_mid=8",
        "-D", "N_V=50", "-D", "ell_max=32", "-D", "eps=1e-5"]


@pytest.fixture
def ids(tmp_path: Path) -> Path:
    path = tmp_path / "ids.npy"
    np.save(path, np.tile(np.arange(20, dtype=np.int64), 20))
    return path


def _train(ids: Path, capfd: pytest.CaptureFixture[str], *extra: str | Path):  # noqa: ANN202
    return run_cli(["train", LOSS, *TINY, "--data", ids, "--seq-len", "8", "--batch-size", "2", *extra], capfd)


def test_non_finite_parameters_never_replace_a_good_checkpoint(tmp_path: Path, ids: Path,
                                                               capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert _train(ids, capfd, "--steps", "1", "--lr", "1e-3", "-o", out).code == 0
    good = (out / "model.safetensors").read_bytes()
    r = _train(ids, capfd, "--steps", "1", "--optimizer", "sgd", "--lr", "3e38", "-o", out)
    judge(r, "the parameters became non-finite by step 1")
    assert f"the last good checkpoint is in {out}" in r.err
    assert (out / "model.safetensors").read_bytes() == good


@pytest.mark.parametrize("lr", ["1e39", "1e-50"])
def test_a_learning_rate_float32_cannot_hold_is_refused(lr: str, ids: Path, capfd: pytest.CaptureFixture[str]) -> None:
    judge(_train(ids, capfd, "--steps", "1", "--lr", lr), "outside float32's range")


def test_train_honours_max_nodes(ids: Path, capfd: pytest.CaptureFixture[str]) -> None:
    judge(_train(ids, capfd, "--steps", "1", "--lr", "1e-3", "--max-nodes", "10"), "the graph grows past 10 IR nodes")
