"""The paper's ETraining over BERT (masked LM) and EDTraining over BART: the gradients of their loss graphs
(tests/frontend/training/, with the plans the frontend makes of them) against torch's on HF models built
from configs with the same weights, masks and batches, within 1e-4 relative per parameter, on the
interpreter and onnxruntime; and `train` follows their plans (SGD, η and the masking of the config)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import BartConfig, BartForConditionalGeneration, BertConfig, BertForMaskedLM

from pseudoformer.backends.onnx import OnnxRunner, to_onnx
from pseudoformer.ir.interpreter import run
from pseudoformer.model import load
from pseudoformer.passes.autodiff import GRAD, gradients
from pseudoformer.passes.manager import named_pipeline, pipeline, run_passes
from pseudoformer.training.loop import train
from pseudoformer.weights.hf_checkpoint import TABLES
from pseudoformer.weights.hf_engine import plan
from pseudoformer.weights.tensor_ref import in_memory
from tests.training.torch_cases import compare

PLANS = Path(__file__).resolve().parents[1] / "frontend" / "training"
SIZES = dict(vocab_size=50, max_position_embeddings=16)


def _bert(directory: Path):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    hf = BertForMaskedLM(BertConfig(**SIZES, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                    intermediate_size=32, layer_norm_eps=1e-12)).eval()
    hf.save_pretrained(directory)
    loss = load(PLANS / "etraining_bert.alg", weights=directory)
    rng = np.random.default_rng(4)
    x = rng.integers(4, 50, (3, 10))
    masked = (rng.random((3, 10)) < 0.3).astype(np.float32)
    masked[:, 0] = 1.0
    m = loss.training.masking
    x_tilde = np.where(masked > 0, loss.config.hyperparameters[m.mask_token], x)
    feed = {m.masked_input: x_tilde, m.target_input: x, m.positions_input: masked}
    logp = torch.log_softmax(hf(torch.from_numpy(x_tilde)).logits, -1)
    picked = logp.gather(-1, torch.from_numpy(x)[..., None])[..., 0]
    return hf, loss, feed, -(picked * torch.from_numpy(masked)).sum(1).mean()


def _bart(directory: Path):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    hf = BartForConditionalGeneration(BartConfig(**SIZES, d_model=16, encoder_layers=2, decoder_layers=2,
                                                 encoder_attention_heads=2, decoder_attention_heads=2,
                                                 encoder_ffn_dim=32, decoder_ffn_dim=32)).eval()
    hf.save_pretrained(directory)
    loss = load(PLANS / "edtraining_bart.alg", weights=directory)
    rng = np.random.default_rng(4)
    z, x = rng.integers(0, 50, (2, 7)), rng.integers(0, 50, (2, 5))
    logp = torch.log_softmax(hf(input_ids=torch.from_numpy(z), decoder_input_ids=torch.from_numpy(x)).logits, -1)
    t = torch.from_numpy(x)
    return hf, loss, {"z": z, "x": x}, -logp[:, :-1].gather(-1, t[:, 1:, None]).sum(dim=(1, 2)).mean()


@pytest.mark.parametrize("backend", ["interpreter", "onnxruntime"])
@pytest.mark.parametrize(("make", "kind"), [(_bert, "bert"), (_bart, "bart")], ids=["bert", "bart"])
def test_gradients_match_torch(tmp_path: Path, make, kind: str, backend: str) -> None:  # type: ignore[no-untyped-def]
    hf, loss, feed, torch_loss = make(tmp_path)
    graph = gradients(run_passes(run_passes(loss.graph, pipeline(2)), named_pipeline("training")))
    out = run(graph, feed, loss.weights) if backend == "interpreter" else \
        OnnxRunner(to_onnx(graph, loss.weights)).run(feed)
    torch_loss.backward()
    grads = {n: p.grad.numpy() for n, p in hf.named_parameters() if p.grad is not None}
    mapped = plan(TABLES[kind], in_memory(grads), hf.config.to_dict(), list(loss.weights))
    want = {p.name: np.array(a) for p, a in mapped.stream()}
    # BART's final_logits_bias is a buffer HF never trains; the mapping fills it with zeros
    want = {k: v for k, v in want.items() if not (kind == "bart" and k == "b_u")}
    assert len(want) >= len(loss.weights) - 1
    assert abs(float(out["loss"]) - float(torch_loss.detach())) <= 1e-5 * abs(float(torch_loss.detach()))
    assert compare({k: out[GRAD + k] for k in want}, want) == {}


def test_train_follows_the_plan_of_etraining(tmp_path: Path) -> None:
    ids = np.random.default_rng(0).integers(4, 50, 600)
    result = train(PLANS / "etraining_bert.alg", ids, seq_len=10, batch_size=4, steps=3, backend="numpy",
                   progress=False)
    assert result.steps == 3 and all(np.isfinite(result.losses))
    model = load(PLANS / "etraining_bert.alg")
    # SGD at the config's η: every parameter moved, but the key biases, whose gradient is exactly 0
    still = [k for k in model.weights if np.array_equal(model.weights[k], result.weights[k])]
    assert still and all(k.endswith("b_k") for k in still)


def test_edtraining_trains_on_pairs_as_torch_does(tmp_path: Path) -> None:
    """EDTraining's pairs (z_n, x_n) from a .npz file: SGD at the config's η, every step's loss torch's.
    HF keeps BART's final_logits_bias (our b_u) as a buffer it never trains, so b_u is frozen here too."""
    hf, model, _, _ = _bart(tmp_path)
    rng = np.random.default_rng(7)
    z, x = rng.integers(0, 50, (3, 7)), rng.integers(0, 50, (3, 5))
    np.savez(tmp_path / "pairs.npz", z=z, x=x)
    # one batch of all three pairs: the shuffled order within it leaves the mean loss as it is
    result = train(PLANS / "edtraining_bart.alg", tmp_path / "pairs.npz", weights=tmp_path, batch_size=3, steps=4,
                   trainable=[k for k in model.weights if k != "b_u"], progress=False)
    eta = load(PLANS / "edtraining_bart.alg").config.hyperparameters["eta"]
    opt = torch.optim.SGD(hf.parameters(), lr=eta)
    want = []
    for _ in range(4):
        opt.zero_grad()
        logp = torch.log_softmax(hf(input_ids=torch.from_numpy(z), decoder_input_ids=torch.from_numpy(x)).logits, -1)
        loss = -logp[:, :-1].gather(-1, torch.from_numpy(x)[:, 1:, None]).sum(dim=(1, 2)).mean()
        loss.backward()
        opt.step()
        want.append(float(loss.detach()))
    np.testing.assert_allclose(result.losses, want, rtol=1e-4)
    assert want[-1] < want[0]


@pytest.mark.parametrize(("arrays", "message"), [
    (dict(z=np.zeros((2, 3), np.int64)), "has no array x"),
    (dict(z=np.zeros((2, 3), np.int64), x=np.zeros((3, 4), np.int64)), "different numbers of examples"),
    (dict(z=np.zeros((2, 3), np.int64), x=np.full((2, 4), 50)), "token id 50 in x .* vocabulary of 50"),
    (dict(z=np.zeros((2, 3), np.float32), x=np.zeros((2, 4), np.int64)), "array z is float32"),
    (dict(z=np.zeros((2, 3), np.int64), x=np.zeros((2, 1), np.int64)), "at least 2"),
])
def test_bad_pairs_get_one_message(tmp_path: Path, arrays: dict, message: str) -> None:
    from pseudoformer.base.errors import UsageError

    np.savez(tmp_path / "pairs.npz", **arrays)
    with pytest.raises(UsageError, match=message):
        train(PLANS / "edtraining_bart.alg", tmp_path / "pairs.npz", steps=1, progress=False)
    with pytest.raises(UsageError, match=r"\.npz file"):
        train(PLANS / "edtraining_bart.alg", np.zeros(10, np.int64), steps=1, progress=False)
