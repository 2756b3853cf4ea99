"""Kind: a run that goes wrong leaves the last good checkpoint, and what a run is told is what it does.

A learning rate that sends θ to ±∞ within a step whose loss was still finite wrote a checkpoint of non-finite
weights with exit 0, over a good one; train took --max-nodes and --allow-nonfinite and ignored them; --lr 1e39
(past float32) and 1e-50 (below it) were accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile.conftest import TINY_TRAIN, TRAIN_LOSS, judge, run_cli


def _train(ids: Path, capfd: pytest.CaptureFixture[str], *extra: str | Path):  # noqa: ANN202
    return run_cli(["train", TRAIN_LOSS, *TINY_TRAIN, "--data", ids, "--seq-len", "8", "--batch-size", "2", *extra], capfd)


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
