"""models/gpt2.alg against HuggingFace GPT2LMHeadModel with the same random weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from tests.models.hf_util import log_softmax, ours, save_hf, tokens

SMALL = dict(n_embd=32, n_head=4, n_layer=2, n_positions=64, vocab_size=101, bos_token_id=0, eos_token_id=0)


def _hf(config: GPT2Config, seed: int = 0) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    m = GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # non-trivial layer norms and biases, so a swapped parameter cannot hide
        for name, p in m.named_parameters():
            if name.endswith("bias") or "ln_" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return m


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    hf = _hf(GPT2Config(**SMALL))
    d = save_hf(hf, tmp_path_factory.mktemp("gpt2-small"))
    return hf, ours("models/gpt2.alg", d)


@pytest.mark.parametrize("shape", [(2, 16), (1, 7), (3, 33), (1, 1)])
def test_small_gpt2_matches_hf(small: tuple, shape: tuple[int, int]) -> None:
    hf, model = small
    x = tokens(*shape, vocab=SMALL["vocab_size"], seed=sum(shape))
    got = model.run(x=x)["Y"]
    with torch.no_grad():
        want = hf(torch.from_numpy(x)).logits.numpy()
    assert got.shape == (*shape, SMALL["vocab_size"])
    assert np.abs(log_softmax(got) - log_softmax(want)).max() <= 1e-4
    assert np.abs(got - want).max() <= 1e-4


def test_gpt2_small_size_matches_hf(tmp_path) -> None:
    """The real gpt2-small hyperparameters (124M parameters), random weights."""
    hf = _hf(GPT2Config(bos_token_id=0, eos_token_id=0))
    d = save_hf(hf, tmp_path)
    model = ours("models/gpt2.alg", d)
    assert model.config.hyperparameters["d_e"] == 768 and model.config.hyperparameters["L"] == 12
    x = tokens(2, 16, vocab=50257, seed=7)
    got = model.run(x=x)["Y"]
    with torch.no_grad():
        want = hf(torch.from_numpy(x)).logits.numpy()
    assert np.abs(log_softmax(got) - log_softmax(want)).max() <= 1e-4


def test_default_config_is_gpt2_small() -> None:
    from pseudoformer.model import load

    m = load("models/gpt2.alg")
    n = sum(w.size for w in m.weights.values())
    assert n == 124_439_808  # HF gpt2 without its tied lm_head
