"""Kind: `train -o` is checked before the first step, and never replaces what the run reads.

`train` checked its -o folder only after the last step, so a file, /dev/null, a FIFO, the data or the .alg given
as -o lost the whole run; and -o pointed at the --weights checkpoint (directly or through a link) replaced the
user's model.safetensors. Every output is now checked as compile's are (pseudoformer/outputs.py), before any work:
no step runs, and the inputs are left as they were."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.hostile.conftest import MODELS, TINY_TRAIN, TRAIN_LOSS, judge, run_cli
from tests.training import torch_cases


def _train(out: Path | str, ids: Path, capfd: pytest.CaptureFixture[str], *extra: str | Path):  # noqa: ANN202
    return run_cli(["train", TRAIN_LOSS, *extra, "--data", ids, "--seq-len", "8", "--batch-size", "2", "--steps", "1",
                    "--lr", "1e-3", "-o", out], capfd)


@pytest.mark.parametrize("kind", ["data", "alg", "null", "fifo", "file", "missing parent"])
def test_an_output_that_is_no_folder_is_refused_before_any_step(kind: str, tmp_path: Path, ids: Path,
                                                                 capfd: pytest.CaptureFixture[str]) -> None:
    before = ids.read_bytes()
    out = {"data": ids, "alg": TRAIN_LOSS, "null": Path("/dev/null"), "fifo": tmp_path / "fifo",
           "file": tmp_path / "file.txt", "missing parent": tmp_path / "file.txt" / "run"}[kind]
    if kind == "fifo":
        os.mkfifo(out)
    if kind in ("file", "missing parent"):
        (tmp_path / "file.txt").write_text("x")
    r = _train(out, ids, capfd, *TINY_TRAIN)
    judge(r, "cannot write -o")
    assert "step/s" not in r.err  # refused before the first step
    assert ids.read_bytes() == before


@pytest.mark.parametrize("how", ["itself", "a link to it", "its hf/ folder"])
def test_an_output_onto_the_weights_checkpoint_is_refused(how: str, tmp_path: Path, ids: Path,
                                                          capfd: pytest.CaptureFixture[str]) -> None:
    torch_cases.gpt2(tmp_path / "hf")
    before = (tmp_path / "hf" / "model.safetensors").read_bytes()
    out = tmp_path / "hf"
    if how == "a link to it":
        out = tmp_path / "link"
        out.symlink_to(tmp_path / "hf")
    if how == "its hf/ folder":  # a run folder whose hf/ is the checkpoint: the export would replace it
        out = tmp_path / "run"
        out.mkdir()
        (out / "hf").symlink_to(tmp_path / "hf")
    r = _train(out, ids, capfd, "--weights", tmp_path / "hf")
    judge(r, "which this command reads")
    assert (tmp_path / "hf" / "model.safetensors").read_bytes() == before


def test_compile_never_replaces_a_file_the_source_uses(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    for name in ("gpt2.alg", "variants.alg"):
        (tmp_path / name).write_bytes((MODELS / name).read_bytes())
    (tmp_path / "paper").mkdir()
    (tmp_path / "paper" / "primitives.alg").write_bytes((MODELS / "paper" / "primitives.alg").read_bytes())
    before = (tmp_path / "variants.alg").read_bytes()
    r = run_cli(["compile", tmp_path / "gpt2.alg", "--config", MODELS / "gpt2.toml", "-D", "L=1",
                 "-o", tmp_path / "variants.alg"], capfd)
    judge(r, "a file the source uses")
    assert (tmp_path / "variants.alg").read_bytes() == before
