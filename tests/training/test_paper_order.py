"""The paper's training loop as a researcher reproduces it outside pseudoformer: Algorithm 13 (DTraining)
followed step by step in torch, knowing only the paper, the CLI and docs/training.md (examples in order, one
per step with --batch-size 1, plain SGD with η), and ETraining's masking draws replayed from the documented
generator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from pseudoformer.cli import main
from pseudoformer.training.data import batches, masked_positions

ETA = 1e-3
SEQ = 8


def _gpt2(directory: Path) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_head=4, n_layer=2, n_positions=64, vocab_size=61,
                                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    model.save_pretrained(directory, safe_serialization=True)
    return model


def test_algorithm_13_step_by_step_in_torch(tmp_path: Path) -> None:
    model = _gpt2(tmp_path / "hf")
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 61, 5 * SEQ).astype(np.int64)
    np.save(tmp_path / "ids.npy", ids)
    out = tmp_path / "out"
    assert main(["train", "models/gpt2.alg", "--weights", str(tmp_path / "hf"), "--data", str(tmp_path / "ids.npy"),
                 "--seq-len", str(SEQ), "--batch-size", "1", "--lr", str(ETA), "--epochs", "2", "-o", str(out)]) == 0
    # Algorithm 13, line by line: for i = 1..N_epochs, for n = 1..N_data in order, θ ← θ − η ∇loss(θ)
    data = ids.reshape(-1, SEQ)
    model.train()
    sgd = torch.optim.SGD(model.parameters(), lr=ETA)
    losses = []
    for _ in range(2):
        for x_n in data:
            x = torch.from_numpy(x_n)[None]
            logp = torch.log_softmax(model(x).logits[0], -1)  # P(θ) ← softmax(GPT2(x_n | θ))
            loss = -logp[torch.arange(SEQ - 1), x[0, 1:]].sum()  # −Σ_{t=1}^{ℓ−1} log P(θ)[x_n[t+1], t]
            sgd.zero_grad()
            loss.backward()
            sgd.step()
            losses.append(loss.item())
    trained = GPT2LMHeadModel.from_pretrained(out / "hf")
    want = dict(model.named_parameters())
    for name, p in trained.named_parameters():
        np.testing.assert_allclose(p.detach().numpy(), want[name].detach().numpy(), rtol=1e-4, atol=2e-5,
                                   err_msg=name)
    rows = [line.split(",") for line in (out / "loss.csv").read_text().splitlines()[1:]]
    np.testing.assert_allclose([float(r[1]) for r in rows], losses, rtol=1e-5)


def test_a_training_algorithm_runs_in_order_and_a_loss_algorithm_shuffles() -> None:
    rows = np.arange(10)[:, None]
    assert [b[:, 0].tolist() for b in batches(rows, 4, 0, 0, shuffle=False)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    shuffled = np.concatenate([b[:, 0] for b in batches(rows, 4, 0, 1, shuffle=True)])
    assert sorted(shuffled.tolist()) == list(range(10))
    assert shuffled.tolist() == np.random.default_rng([0, 1]).permutation(10).tolist()  # the documented order


def test_etraining_masks_by_the_documented_generator() -> None:
    hide = masked_positions((3, 7), 0.3, seed=5, epoch=1, batch=2)
    want = np.random.default_rng([0x6D61736B, 5, 1, 2]).random((3, 7)) < 0.3
    assert np.array_equal(hide, want)
