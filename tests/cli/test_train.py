"""`pseudoformer train`: a HF GPT-2 fine-tuned into a checkpoint that transformers loads with the same
logits; the loss curve and checkpoints; one clear message (exit 1) for each kind of bad input; a
non-finite loss that stops training and keeps the last good checkpoint; Ctrl-C that saves and exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import GPT2LMHeadModel

from pseudoformer.cli import main
from pseudoformer.model import load
from pseudoformer.weights.safetensors_io import read_safetensors, save_weights
from tests.training import torch_cases
from tests.training.tiny_train import LOSS, TINY, token_stream


@pytest.fixture
def ids(tmp_path: Path) -> Path:
    return token_stream(tmp_path)


def _train(*args: str) -> int:
    return main(["train", LOSS, *TINY, "--seq-len", "8", "--batch-size", "4", *args])


def test_fine_tuned_gpt2_loads_in_transformers_with_the_same_logits(tmp_path: Path, ids: Path) -> None:
    case = torch_cases.gpt2(tmp_path / "hf")
    out = tmp_path / "out"
    code = main(["train", LOSS, "--weights", str(tmp_path / "hf"), "--data", str(ids), "--seq-len", "8",
                 "--batch-size", "2", "--steps", "4", "--lr", "1e-3", "-o", str(out)])
    assert code == 0
    ours = read_safetensors(out / "model.safetensors")
    assert not np.array_equal(ours["theta.W_e"], case.model.weights["theta.W_e"])  # it trained
    trained = load("models/gpt2.alg", weights=out / "hf")  # the exported HF checkpoint, read back
    assert all(np.array_equal(trained.weights[k], ours["theta." + k]) for k in trained.weights)
    hf = GPT2LMHeadModel.from_pretrained(out / "hf").eval()
    x = case.tokens(2, 7, seed=3)
    with torch.no_grad():
        want = hf(torch.from_numpy(x)).logits.numpy()
    assert np.abs(trained.run(x=x)["Y"] - want).max() <= 1e-4
    assert (out / "loss.svg").read_text().startswith("<svg") and len((out / "loss.csv").read_text().splitlines()) == 5


def test_an_exported_checkpoint_with_a_tied_copy_keeps_it_tied(tmp_path: Path, ids: Path) -> None:
    """Older transformers saved GPT-2's lm_head.weight beside wte: the export writes both, equal, trained."""
    torch_cases.gpt2(tmp_path / "hf")
    source = read_safetensors(tmp_path / "hf" / "model.safetensors")
    save_weights({**source, "lm_head.weight": source["transformer.wte.weight"]}, tmp_path / "hf" / "model.safetensors")
    out = tmp_path / "out"
    assert main(["train", LOSS, "--weights", str(tmp_path / "hf"), "--data", str(ids), "--seq-len", "8",
                 "--batch-size", "2", "--steps", "2", "--lr", "1e-3", "-o", str(out)]) == 0
    exported = read_safetensors(out / "hf" / "model.safetensors")
    assert sorted(exported) == sorted([*source, "lm_head.weight"])
    assert np.array_equal(exported["lm_head.weight"], exported["transformer.wte.weight"])
    assert not np.array_equal(exported["transformer.wte.weight"], source["transformer.wte.weight"])  # trained


def test_checkpoints_every_n_steps_and_the_loss_falls(tmp_path: Path, ids: Path) -> None:
    out = tmp_path / "out"
    assert _train("--data", str(ids), "--steps", "12", "--lr", "1e-2", "--save-every", "5", "-o", str(out)) == 0
    rows = [line.split(",") for line in (out / "loss.csv").read_text().splitlines()[1:]]
    assert [int(r[0]) for r in rows] == list(range(1, 13)) and float(rows[-1][1]) < float(rows[0][1])
    assert {"model.safetensors", "optimizer.safetensors", "loss.csv", "loss.svg", "training.json"} <= \
        {p.name for p in out.iterdir()}


def test_the_arena_option_trains_the_same_steps(tmp_path: Path, ids: Path) -> None:
    """--no-arena changes where onnxruntime's tensors live, not what the step computes."""
    losses = []
    for extra in ([], ["--no-arena"]):
        out = tmp_path / ("arena" if extra else "plain")
        assert _train("--data", str(ids), "--steps", "3", "--lr", "1e-2", "-o", str(out), *extra) == 0
        losses.append([float(r.split(",")[1]) for r in (out / "loss.csv").read_text().splitlines()[1:]])
    assert len(losses[0]) == 3 and np.allclose(losses[0], losses[1], rtol=1e-6, atol=0)


def test_the_arena_option_is_onnxruntime_s(tmp_path: Path, ids: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _train("--data", str(ids), "--steps", "1", "--lr", "1e-2", "--backend", "interpreter", "--no-arena") == 1
    err = capsys.readouterr().err
    assert "--no-arena is about onnxruntime's memory arena" in err and err.count("error") == 1 and "Traceback" not in err


@pytest.mark.parametrize(("make", "args", "message"), [
    (lambda p: np.save(p, np.array([1, 2, 99] * 10, np.int64)), [], "token id 99 (position 2) is outside"),
    (lambda p: np.save(p, np.ones(30, np.float32)), [], "holds float32 values: token ids are integers"),
    (lambda p: np.save(p, np.ones((2, 3, 4), np.int64)), [], "has shape [2, 3, 4]"),
    (lambda p: np.save(p, np.zeros(0, np.int64)), [], "holds no tokens"),
    (lambda p: np.save(p, np.ones(30, np.int64)), ["--lr", "0"], "--lr must be a finite number in (0, ∞)"),
    (lambda p: np.save(p, np.ones(30, np.int64)), ["--lr", "-1"], "--lr must be a finite number in (0, ∞)"),
    (lambda p: np.save(p, np.ones(30, np.int64)), ["--seq-len", "1"], "a sequence needs at least 2 tokens"),
    (lambda p: np.save(p, np.ones(5, np.int64)), [], "fewer than one sequence"),
])
def test_bad_input_is_one_clear_message(tmp_path: Path, capsys: pytest.CaptureFixture[str], make, args,  # type: ignore[no-untyped-def]
                                        message: str) -> None:
    data = tmp_path / "data.npy"
    make(data)
    full = ["--lr", "1e-3", *args] if "--lr" not in args else args
    assert _train("--data", str(data), "--steps", "1", *full) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("error") == 1 and "Traceback" not in err


def test_a_text_file_needs_a_tokenizer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data.txt"
    data.write_text("hello world")
    assert _train("--data", str(data), "--lr", "1e-3") == 1
    assert "give --tokenizer" in capsys.readouterr().err


def test_a_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path: Path, ids: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert _train("--data", str(ids), "--steps", "40", "--lr", "1e9", "--optimizer", "sgd", "--save-every", "1",
                  "-o", str(out)) == 1
    err = capsys.readouterr().err
    assert "training stopped" in err and "at step " in err and "Traceback" not in err
    step = int(err.split("at step ")[1].split(":")[0])
    kept = read_safetensors(out / "model.safetensors")
    assert all(np.isfinite(v).all() for v in kept.values())
    assert len((out / "loss.csv").read_text().splitlines()) == step  # the header and the step − 1 good ones


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_saves_a_checkpoint_and_exits_cleanly(sig: signal.Signals, tmp_path: Path, ids: Path) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-c", "import sys; from pseudoformer.cli import main; sys.exit(main())", "train", LOSS, *TINY, "--seq-len", "8", "--batch-size", "4",
           "--data", str(ids), "--steps", "100000", "--lr", "1e-3", "--backend", "interpreter", "--log-every", "1", "-o", str(out)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stderr is not None
    seen = ""
    while "  loss " not in seen:  # stderr is a pipe: a plain line with the loss once steps run
        c = proc.stderr.read(1)
        assert c, f"train ended before its first step: {seen[-2000:]}"
        seen += c
    proc.send_signal(sig)
    rest = proc.communicate(timeout=120)[1]
    assert proc.returncode == 0, rest
    assert "interrupted after step" in rest and "Traceback" not in rest
    assert (out / "model.safetensors").exists() and (out / "loss.csv").exists()


def test_edtraining_trains_on_pairs_from_a_npz_file(tmp_path: Path, ids: Path, capsys: pytest.CaptureFixture) -> None:
    bart = str(Path(__file__).resolve().parents[1] / "frontend" / "training" / "edtraining_bart.alg")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "pairs.npz", z=rng.integers(0, 50, (6, 7)), x=rng.integers(0, 50, (6, 5)))
    assert main(["train", bart, "--data", str(tmp_path / "pairs.npz"), "--batch-size", "3", "--steps", "2",
                 "-o", str(tmp_path / "out")]) == 0
    assert "trained 2 steps" in capsys.readouterr().err
    assert main(["train", bart, "--data", str(ids), "--steps", "1"]) == 1
    assert "reads a .npz file with one integer array per member" in capsys.readouterr().err
