"""Dropout as the notation's random draw (`X̃ ← 0 or X / (1 − p) randomly with probability p or 1 − p`,
frontend/draws.py): the identity in the compiled model, an input of the trained loss graph whose masks the trainer
draws from the documented generator (pseudoformer/training/draws.py), which a torch script replays step by step
with no knowledge of our internals: the same losses and weights on the interpreter, onnxruntime and the torch
trainer, with --grad-accum (the masks drawn for the whole step); the validation loss is the model's at inference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pseudoformer.ir.interpreter import run
from pseudoformer.model import load
from pseudoformer.training.loop import train

ALG = Path(__file__).with_name("dropout_loss.alg")
SIZES = ["d=4", "N_V=7", "p=0.25"]
SEQ, ROWS, SEED, ETA = 5, 4, 4, 0.5


def _reference_loss(w_e: np.ndarray, w_u: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The loss of each row without dropout, in numpy."""
    logits = np.einsum("vd,dbt->bvt", w_u, w_e[:, x].astype(np.float64))
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    return -np.take_along_axis(logp[:, :, :-1], x[:, None, 1:], 1).sum((1, 2))


def test_the_compiled_model_drops_nothing() -> None:
    model = load(ALG, defines=SIZES, seed=SEED)
    assert [n.attrs["name"] for n in model.graph.inputs] == ["x"] and "draws" not in model.graph.meta
    x = np.random.default_rng(0).integers(0, 7, (3, SEQ))
    got = run(model.graph, {"x": x}, model.weights)["loss"]
    np.testing.assert_allclose(got, _reference_loss(model.weights["W_e"], model.weights["W_u"], x), rtol=1e-5)
    trained = load(ALG, defines=SIZES, seed=SEED, draws=True)  # as `train` elaborates it
    assert [n.attrs["name"] for n in trained.graph.inputs] == ["x", "draw_0"]
    assert trained.graph.meta["draws"] == {"draw_0": 0.25}


@pytest.mark.parametrize("backend", ["numpy", "onnx", "torch"])
def test_torch_replays_the_masks_from_the_documented_generator(backend: str) -> None:
    torch = pytest.importorskip("torch")
    ids = np.random.default_rng(3).integers(0, 7, 3 * ROWS * SEQ)
    result = train(ALG, ids, defines=SIZES, seq_len=SEQ, batch_size=2, grad_accum=2, steps=3, lr=ETA,
                   optimizer="sgd", shuffle=False, seed=SEED, backend=backend, val_data=ids, progress=False)
    start = load(ALG, defines=SIZES, seed=SEED).weights
    w_e = torch.tensor(start["W_e"], requires_grad=True)
    w_u = torch.tensor(start["W_u"], requires_grad=True)
    sgd = torch.optim.SGD([w_e, w_u], lr=ETA)
    losses = []
    for b, x in enumerate(torch.from_numpy(ids.reshape(-1, ROWS, SEQ))):
        # docs/training.md: draw k of the step's batch b of epoch e, one uniform draw per entry, row-major
        dropped = np.random.default_rng([0x64726F70, SEED, 0, b, 0]).random((ROWS, 4, SEQ)) < 0.25
        keep = torch.from_numpy(~dropped)
        x_tilde = w_e[:, x].permute(1, 0, 2) * keep / (1 - 0.25)
        logp = torch.log_softmax(w_u @ x_tilde, dim=1)
        loss = -logp[:, :, :-1].gather(1, x[:, None, 1:]).sum((1, 2)).mean()
        sgd.zero_grad()
        loss.backward()
        sgd.step()
        losses.append(loss.item())
    np.testing.assert_allclose(result.losses, losses, rtol=1e-5)
    np.testing.assert_allclose(result.weights["W_e"], w_e.detach().numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(result.weights["W_u"], w_u.detach().numpy(), rtol=1e-4, atol=1e-6)
    val = _reference_loss(w_e.detach().numpy(), w_u.detach().numpy(), ids.reshape(-1, SEQ)).mean()
    np.testing.assert_allclose(result.history[-1][3], val, rtol=1e-5)  # no dropout: the model at inference
