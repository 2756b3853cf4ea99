"""`train --resume RUN` from what the run saved (training.json): a run whose --weights was a HuggingFace checkpoint
directory took its sizes from that directory's config.json and read W_u as W_eᵀ (GPT-2 ties them); resumed with
neither the -D sizes nor --weights, and with that directory gone, it follows the uninterrupted run and exports hf/
from its own. A run folder whose training.json does not record the sizes is refused in one line that says what to
give."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")

from pseudoformer.cli import main  # noqa: E402
from pseudoformer.weights.safetensors_io import read_safetensors  # noqa: E402
from tests.training import torch_cases  # noqa: E402


def test_a_run_from_a_hf_directory_resumes_without_its_sizes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    torch_cases.gpt2(tmp_path / "hf")
    np.save(tmp_path / "ids.npy", np.random.default_rng(0).integers(0, torch_cases.GPT2_SMALL["vocab_size"], 24 * 8))
    # models/gpt2.alg trains through gpt2_dtraining.alg, whose config holds GPT-2 small's sizes: the checkpoint's
    # config.json overrode them, and the run's model.safetensors is of the checkpoint's sizes
    base = ["train", "models/gpt2.alg", "--data", str(tmp_path / "ids.npy"), "--seq-len", "8", "--batch-size", "4",
            "--lr", "1e-2"]
    first = ["--weights", str(tmp_path / "hf")]
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert main([*base, *first, "--steps", "5", "-o", str(whole)]) == 0
    assert main([*base, *first, "--steps", "2", "-o", str(part)]) == 0
    shutil.rmtree(tmp_path / "hf")
    capsys.readouterr()
    assert main([*base, "--steps", "5", "--resume", str(part), "-o", str(part)]) == 0, capsys.readouterr().err
    for name in ("model.safetensors", "hf/model.safetensors"):
        want, got = read_safetensors(whole / name), read_safetensors(part / name)
        assert set(got) == set(want), name
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=f"{name}: {k}")

    def losses(d: Path) -> list[str]:
        return [r.split(",")[1] for r in (d / "loss.csv").read_text().splitlines()[1:]]

    assert losses(part) == losses(whole) and len(losses(whole)) == 5
    assert (part / "hf" / "config.json").read_text() == (whole / "hf" / "config.json").read_text()

    # a training.json without the sizes (as an older pseudoformer wrote it): one line naming what to give
    meta = json.loads((part / "training.json").read_text())
    del meta["hyperparameters"]
    (part / "training.json").write_text(json.dumps(meta))
    capsys.readouterr()
    assert main([*base, "--steps", "7", "--resume", str(part)]) == 1
    err = "\n".join(line for line in capsys.readouterr().err.splitlines() if not line.startswith("note: "))
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"{part}/model.safetensors' do not fit" in err, err
    assert "training.json does not record the model's hyperparameters" in err and "-D" in err, err
