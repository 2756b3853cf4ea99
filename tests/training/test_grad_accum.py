"""Gradient accumulation (`train --grad-accum N`) and the per-token mean (`--loss-reduction mean`), on every
trainer: N micro-batches of B rows give one batch of N·B's losses and parameters (AdamW with warm-up, clipping
of the summed gradient and decay; a last, shorter step cut unevenly), the step count, --save-every, --log-every,
the schedule and --resume count optimizer steps, and the mean is torch's mean cross-entropy (GPT-2's DTraining,
BERT's ETraining with its masks, from HF models built from configs)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pseudoformer.base.errors import UsageError
from pseudoformer.cli import main
from pseudoformer.model import load
from pseudoformer.passes.training_step import ACC, LR, WEIGHT
from pseudoformer.training import runtimes, steps
from pseudoformer.training.accumulate import make_accumulating, micro_batches
from pseudoformer.training.compile import compile_step
from pseudoformer.training.loop import train
from pseudoformer.training.options import TrainingOptions
from pseudoformer.training.runtimes import OrtSplitStep, make_runtime
from pseudoformer.weights.safetensors_io import read_safetensors
from tests.training.test_paper_order import _gpt2
from tests.training.test_step_backends import OPTIMIZERS

HERE = Path(__file__).parent
TINY = ["L=1", "H=2", "d_e=8", "d_mlp=16", "d_attn=4", "d_mid=4", "N_V=11", "ell_max=16", "eps=1e-5"]
GPT2 = ["L=2", "H=2", "d_e=16", "d_mlp=32", "d_attn=8", "d_mid=8", "ell_max=32", "N_V=23", "eps=1e-5"]
BATCHES = [np.random.default_rng(i).integers(0, 11, (3, 6)) for i in range(3)]


def _steps(opt: str):  # type: ignore[no-untyped-def]
    """The plain step and the accumulating step of one model."""
    model = load(HERE / "gpt2_loss.alg", defines=TINY, seed=2)
    train_ = [k for k in model.weights if ".b_k" not in k]  # an exactly zero gradient: AdamW's rounding noise
    return [compile_step(model.graph, model.weights, train=train_, optimizer=OPTIMIZERS[opt], accumulate=a)
            for a in (False, True)]


class _DeviceOnCpu(runtimes.DeviceValues):
    """onnxruntime's device path (OrtValues it allocates, no host views) run on the CPU."""

    def __init__(self, ort, provider: str) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ort, provider)
        self.host_arrays = False


# TVM's compile of a step's halves takes a minute: AdamW with clipping alone, the case that reads the whole sum
@pytest.mark.parametrize(("opt", "backend"), [(o, b) for o in OPTIMIZERS for b in ("interpreter", "onnxruntime", "device")]
                         + [("adamw", "tvm")])
def test_micro_batches_make_the_step_of_the_whole_batch(opt: str, backend: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Three optimizer steps of 3 rows as micro-batches of 2 and 1 (weights 2/3, 1/3) against the plain step on
    all 3 rows: AdamW's clipping (0.5) reads the summed gradient."""
    if backend == "tvm":
        pytest.importorskip("tvm")
    plain, acc = _steps(opt)
    reference = make_runtime("interpreter", plain.graph, plain.frozen, plain.state)
    if backend == "device":
        monkeypatch.setattr(runtimes, "DeviceValues", _DeviceOnCpu)
    rt = make_accumulating("onnxruntime" if backend == "device" else backend, acc.split, acc.frozen, acc.state,
                           acc.graph)
    for i, x in enumerate(BATCHES):
        want = reference.step({"x": x}, 0.05)
        micro = micro_batches({"x": x}, 2, None)
        assert [len(f["x"]) for f, _ in micro] == [2, 1] and [w for _, w in micro] == [2 / 3, 1 / 3]
        np.testing.assert_allclose(rt.step_many(micro, 0.05), want, rtol=1e-5, err_msg=str(i))
    got, want = rt.values(), reference.values()
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-6, err_msg=k)
    if backend in ("onnxruntime", "device"):  # the sum is written over the buffer it is read from
        assert isinstance(rt, OrtSplitStep) and rt.accumulates


def test_the_accumulating_step_is_cut_between_the_sum_and_the_update() -> None:
    _, acc = _steps("adamw")
    gradient = {n.attrs["name"] for n in acc.split.gradient.inputs}
    update = {n.attrs["name"] for n in acc.split.update.inputs}
    theta = acc.trainable
    assert {WEIGHT, *(ACC + k for k in theta)} <= gradient and LR not in gradient
    assert not update & {WEIGHT, "x"} and {LR, *(f"grad.{k}" for k in theta)} <= update
    # clipping reads the whole sum before any write: the update runs over whole tensors; without it, in pieces
    clipped = make_accumulating("onnxruntime", acc.split, acc.frozen, acc.state, acc.graph, update_chunk=5)
    _, sgd = _steps("sgd")
    plain = make_accumulating("onnxruntime", sgd.split, sgd.frozen, sgd.state, sgd.graph, update_chunk=5)
    assert clipped.pieces == [] and plain.pieces != []


def _data(n: int = 400, vocab: int = 23) -> np.ndarray:
    return np.random.default_rng(7).integers(0, vocab, n, dtype=np.int64)


@pytest.mark.parametrize("backend", ["numpy", "onnx", "torch", "tvm"])
def test_grad_accum_trains_as_one_batch_n_times_the_size(backend: str) -> None:
    """33 sequences, 12 a step (4 × 3): 3 steps an epoch, the last of micro-batches 4, 4 and 1; 5 steps cross
    into the second epoch's shuffle."""
    pytest.importorskip({"torch": "torch", "tvm": "tvm"}.get(backend, "numpy"))
    start = load(HERE / "gpt2_loss.alg", defines=GPT2, seed=1).weights
    # b_k: an exactly zero gradient, which AdamW turns into steps of rounding noise
    trainable = [k for k in start if ".b_k" not in k]
    common = dict(defines=GPT2, seq_len=12, steps=5, lr=3e-3, optimizer="adamw", warmup=2, clip=0.5,
                  weight_decay=0.1, progress=False, seed=1, backend=backend, trainable=trainable)
    whole = train(HERE / "gpt2_loss.alg", _data(), batch_size=12, **common)
    parts = train(HERE / "gpt2_loss.alg", _data(), batch_size=4, grad_accum=3, **common)
    assert parts.steps == whole.steps == 5
    np.testing.assert_allclose(parts.losses, whole.losses, rtol=1e-5)
    for k, w in whole.weights.items():
        np.testing.assert_allclose(parts.weights[k], w, rtol=1e-4, atol=1e-6, err_msg=k)
    assert not np.allclose(parts.weights["theta.W_e"], start["theta.W_e"])


def _cli(out: Path, ids: Path, *args: str) -> int:
    argv = ["train", str(HERE / "gpt2_loss.alg"), "--data", str(ids), "--seq-len", "8", "--lr", "1e-2",
            "--warmup", "2", "-o", str(out), *args]
    for d in TINY:
        argv += ["-D", d]
    return main(argv)


def _losses(d: Path) -> list[float]:
    return [float(r.split(",")[1]) for r in (d / "loss.csv").read_text().splitlines()[1:]]


@pytest.fixture
def ids(tmp_path: Path) -> Path:
    path = tmp_path / "ids.npy"
    np.save(path, np.random.default_rng(0).integers(0, 11, 24 * 8).astype(np.int64))
    return path


def test_steps_checkpoints_logs_and_the_schedule_count_optimizer_steps(
        tmp_path: Path, ids: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    saved: list[int] = []
    real = steps._save
    monkeypatch.setattr(steps, "_save", lambda run, history, done: (saved.append(done), real(run, history, done)))
    assert _cli(tmp_path / "parts", ids, "--batch-size", "2", "--grad-accum", "2", "--steps", "4", "--save-every",
                "2", "--log-every", "2") == 0
    err = capsys.readouterr().err
    assert "step 2/4" in err and "step 4/4" in err and "step 1/4" not in err and "trained 4 steps" in err
    assert saved == [2, 4, 4]
    assert json.loads((tmp_path / "parts" / "training.json").read_text())["steps"] == 4
    # the warm-up and its cosine over 4 optimizer steps: one batch of 4 rows a step follows the same curve
    assert _cli(tmp_path / "whole", ids, "--batch-size", "4", "--steps", "4") == 0
    np.testing.assert_allclose(_losses(tmp_path / "parts"), _losses(tmp_path / "whole"), rtol=1e-5)
    assert len(_losses(tmp_path / "parts")) == 4


def test_resume_counts_optimizer_steps_and_refuses_another_step_size(tmp_path: Path, ids: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    accum = ("--batch-size", "2", "--grad-accum", "2")
    assert _cli(tmp_path / "whole", ids, *accum, "--steps", "5") == 0
    assert _cli(tmp_path / "part", ids, *accum, "--steps", "2") == 0
    assert _cli(tmp_path / "part", ids, *accum, "--steps", "5", "--resume", str(tmp_path / "part")) == 0
    whole = read_safetensors(tmp_path / "whole" / "model.safetensors")
    got = read_safetensors(tmp_path / "part" / "model.safetensors")
    assert all(np.array_equal(got[k], whole[k]) for k in whole)
    assert _losses(tmp_path / "part") == _losses(tmp_path / "whole")
    capsys.readouterr()
    assert _cli(tmp_path / "part", ids, "--batch-size", "2", "--grad-accum", "3", "--steps", "9", "--resume",
                str(tmp_path / "part")) == 1
    err = capsys.readouterr().err
    assert "took 4 examples a step" in err and "Traceback" not in err


def test_the_options_are_checked(tmp_path: Path, ids: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(UsageError, match="--grad-accum must be a whole number ≥ 1"):
            TrainingOptions(grad_accum=bad)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="the reductions are sum, mean"):
        TrainingOptions(loss_reduction="avg")
    assert _cli(tmp_path / "out", ids, "--grad-accum", "0", "--steps", "1") == 1
    err = capsys.readouterr().err
    assert "--grad-accum must be a whole number ≥ 1, got 0" in err and err.count("\n") == 1
    # a loss algorithm's loss is what it writes: its mean is written in it
    assert _cli(tmp_path / "out", ids, "--loss-reduction", "mean", "--steps", "1") == 1
    err = capsys.readouterr().err
    assert "gpt2_mean_loss.alg" in err and err.count("\n") == 1


def test_the_per_token_mean_is_torch_s_mean_cross_entropy(tmp_path: Path) -> None:
    """DTraining over GPT-2 with --loss-reduction mean and --grad-accum 2: each step's loss, the trained weights
    and the validation loss are torch's over the step's 4 sequences (SGD, in order)."""
    torch = pytest.importorskip("torch")
    from transformers import GPT2LMHeadModel

    model = _gpt2(tmp_path / "hf")
    seq, eta = 8, 0.5
    ids = np.random.default_rng(1).integers(0, 61, 12 * seq).astype(np.int64)
    result = train("models/gpt2.alg", ids, weights=tmp_path / "hf", seq_len=seq, batch_size=2, grad_accum=2,
                   loss_reduction="mean", lr=eta, optimizer="sgd", val_data=ids, out=tmp_path / "out", progress=False)
    data = torch.from_numpy(ids.reshape(-1, seq))
    sgd = torch.optim.SGD(model.parameters(), lr=eta)
    losses = []
    for x in data.split(4):
        logits = model(x).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 61), x[:, 1:].reshape(-1))  # mean over tokens
        sgd.zero_grad()
        loss.backward()
        sgd.step()
        losses.append(loss.item())
    np.testing.assert_allclose(result.losses, losses, rtol=1e-5)
    trained = GPT2LMHeadModel.from_pretrained(tmp_path / "out" / "hf")
    want = dict(model.named_parameters())
    for name, p in trained.named_parameters():
        np.testing.assert_allclose(p.detach().numpy(), want[name].detach().numpy(), rtol=1e-4, atol=2e-5,
                                   err_msg=name)
    with torch.no_grad():
        val = torch.nn.functional.cross_entropy(model(data).logits[:, :-1].reshape(-1, 61), data[:, 1:].reshape(-1))
    np.testing.assert_allclose(result.history[-1][3], val.item(), rtol=1e-5)


def test_etraining_s_mean_is_over_the_step_s_masked_tokens(tmp_path: Path) -> None:
    """ETraining over BERT: the masks drawn for the whole step (4 rows, data.masked_positions), its mean over every
    masked token of the step as torch's cross_entropy over the labels it does not ignore, the two micro-batches
    weighted by their masked tokens."""
    torch = pytest.importorskip("torch")
    from transformers import BertConfig, BertForMaskedLM

    from pseudoformer.training.data import masked_positions

    plans = HERE.parent / "frontend" / "training"
    torch.manual_seed(0)
    hf = BertForMaskedLM(BertConfig(vocab_size=50, max_position_embeddings=16, hidden_size=16, num_hidden_layers=2,
                                    num_attention_heads=2, intermediate_size=32, layer_norm_eps=1e-12)).eval()
    hf.save_pretrained(tmp_path / "hf")
    hp = load(plans / "etraining_bert.alg", weights=tmp_path / "hf").config.hyperparameters
    seq = 10
    ids = np.random.default_rng(0).integers(4, 50, 12 * seq).astype(np.int64)
    result = train(plans / "etraining_bert.alg", ids, weights=tmp_path / "hf", seq_len=seq, batch_size=2,
                   grad_accum=2, loss_reduction="mean", progress=False)
    sgd = torch.optim.SGD(hf.parameters(), lr=hp["eta"])
    losses, counts = [], []
    for b, x in enumerate(ids.reshape(-1, 4, seq)):
        hide = masked_positions(x.shape, hp["p_mask"], 0, 0, b)
        labels = torch.from_numpy(np.where(hide, x, -100))
        logits = hf(torch.from_numpy(np.where(hide, hp["mask_token"], x))).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 50), labels.reshape(-1))
        sgd.zero_grad()
        loss.backward()
        sgd.step()
        losses.append(loss.item())
        counts.append(int(hide[:2].sum()) != int(hide[2:].sum()))
    assert any(counts)  # micro-batches of unequal masked counts: weighted by tokens, not rows
    np.testing.assert_allclose(result.losses, losses, rtol=1e-5)
