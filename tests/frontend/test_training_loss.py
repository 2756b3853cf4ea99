"""The loss graph of a training algorithm computes the paper's loss: for a tiny GPT-2, Llama and BART the
next-token cross-entropy of the model's logits, summed over positions 1 … ℓ−1, as torch's cross_entropy
gives it; for a tiny BERT, the cross-entropy at the masked positions only. The model's logits come from
the model's own graph with the same weights (the loss graph's parameters carry the model's names, so
one seeded init fills both); the loss graph runs on the interpreter and, compiled, on onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import pseudoformer
from pseudoformer.model import Model, load

HERE = Path(__file__).parent / "training"
TRAINING_ONLY = {"N_epochs", "eta", "p_mask", "mask_token"}


def model_beside(loss: Model, name: str, entry: str) -> Model:
    """The model the loss calls, at the loss's sizes and seed: the same weights, by name."""
    hyper = {k: v for k, v in loss.graph.meta["hyperparameters"].items() if k not in TRAINING_ONLY}
    model = load(name, entry=entry, defines=[f"{k}={v}" for k, v in hyper.items()], seed=loss.meta["seed"])
    assert sorted(model.weights) == sorted(loss.weights)
    for k, w in loss.weights.items():
        np.testing.assert_array_equal(model.weights[k], w)
    return model


def next_token_loss(logits: np.ndarray, x: np.ndarray) -> np.ndarray:
    """−Σ_{t=1}^{ℓ−1} log softmax(logits)[x[t+1], t], per example, by torch."""
    b, n, v = logits.shape
    ce = torch.nn.functional.cross_entropy(torch.from_numpy(logits[:, :-1].astype(np.float64)).reshape(-1, v),
                                           torch.from_numpy(x[:, 1:]).reshape(-1), reduction="none")
    return ce.reshape(b, n - 1).sum(1).numpy()


@pytest.mark.parametrize(("file", "model", "entry"), [("dtraining_gpt2", "gpt2", "GPT2"),
                                                      ("dtraining_llama", "llama", "Llama")])
def test_the_decoder_loss_is_the_next_token_cross_entropy(file: str, model: str, entry: str) -> None:
    loss = load(HERE / f"{file}.alg", seed=3)
    ref_model = model_beside(loss, model, entry)
    x = np.random.default_rng(0).integers(0, 50, (3, 9))
    got = loss.run(x=x)["loss"]
    want = next_token_loss(ref_model.run(x=x)["Y"], x)
    assert got.shape == (3,) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert np.all(want > 1.0)  # a real loss, not a trivially small one


def test_the_gpt2_loss_compiled_runs_on_onnxruntime_as_on_the_interpreter() -> None:
    compiled = pseudoformer.compile(HERE / "dtraining_gpt2.alg", seed=1)
    x = np.random.default_rng(1).integers(0, 50, (2, 12))
    want = next_token_loss(model_beside(compiled.model, "gpt2", "GPT2").run(x=x)["Y"], x)
    np.testing.assert_allclose(compiled.run(x=x)["loss"], want, rtol=1e-5)
    np.testing.assert_allclose(compiled.model.run(x=x)["loss"], want, rtol=1e-5)


def test_the_bart_loss_scores_the_decoder_sequence_given_the_encoder_one() -> None:
    loss = load(HERE / "edtraining_bart.alg", seed=2)
    ref_model = model_beside(loss, "bart", "BART")
    rng = np.random.default_rng(2)
    z, x = rng.integers(0, 50, (2, 7)), rng.integers(0, 50, (2, 5))
    got = loss.run(z=z, x=x)["loss"]
    np.testing.assert_allclose(got, next_token_loss(ref_model.run(z=z, x=x)["Y"], x), rtol=1e-5)


def masked_loss(logits: np.ndarray, x: np.ndarray, masked: np.ndarray) -> np.ndarray:
    """−Σ_{t ∈ T̃} log softmax(logits)[x[t], t], per example, by torch."""
    lp = torch.log_softmax(torch.from_numpy(logits.astype(np.float64)), -1)
    picked = torch.gather(lp, -1, torch.from_numpy(x)[..., None])[..., 0]
    return -(picked * torch.from_numpy(masked.astype(np.float64))).sum(1).numpy()


def test_the_bert_loss_is_the_cross_entropy_at_the_masked_positions() -> None:
    loss = load(HERE / "etraining_bert.alg", seed=4)
    plan = loss.training
    assert plan is not None and plan.masking is not None
    ref_model = model_beside(loss, "bert", "BERT")
    rng = np.random.default_rng(4)
    x = rng.integers(4, 50, (3, 10))
    masked = (rng.random((3, 10)) < 0.3).astype(np.float32)
    masked[:, 0] = 1.0  # every example has a masked position
    mask_token = loss.config.hyperparameters[plan.masking.mask_token]
    x_tilde = np.where(masked > 0, mask_token, x)
    feed = {plan.masking.masked_input: x_tilde, plan.masking.target_input: x, plan.masking.positions_input: masked}
    got = loss.run(**feed)["loss"]
    want = masked_loss(ref_model.run(x=x_tilde)["Y"], x, masked)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    # The positions left unmasked do not count: scoring every position gives another number.
    everything = loss.run(**{**feed, plan.masking.positions_input: np.ones_like(masked)})["loss"]
    assert np.all(everything > got + 1.0)


def test_an_hf_checkpoint_loads_onto_the_loss_graph_and_gives_hfs_loss(tmp_path: Path) -> None:
    """The loss graph's parameters carry GPT-2's own names, so `--weights DIR` of a HF GPT-2 checkpoint
    fills them (no parameter group in the way), and the loss is HF's: its labels loss is the mean over
    the ℓ − 1 predicted tokens of the batch, ours the sum per example."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=16, vocab_size=50, n_positions=16,
                                    bos_token_id=0, eos_token_id=0)).eval()
    hf.save_pretrained(tmp_path)
    loss = load(HERE / "dtraining_gpt2.alg", weights=tmp_path)
    x = np.random.default_rng(5).integers(0, 50, (2, 8))
    with torch.no_grad():
        want = hf(torch.from_numpy(x), labels=torch.from_numpy(x)).loss.item()
    np.testing.assert_allclose(loss.run(x=x)["loss"].sum() / (2 * 7), want, rtol=1e-5)
