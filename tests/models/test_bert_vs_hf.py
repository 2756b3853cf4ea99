"""models/bert.alg against HuggingFace BertForMaskedLM and BertModel with the same random weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, BertModel

from tests.models.hf_util import log_softmax, ours, save_hf, tokens

SMALL = dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64, vocab_size=101,
             max_position_embeddings=64)


def _perturb(m: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name or "token_type" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return m.eval()


@pytest.fixture(scope="module")
def mlm(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    torch.manual_seed(1)
    hf = _perturb(BertForMaskedLM(BertConfig(**SMALL)))
    d = save_hf(hf, tmp_path_factory.mktemp("bert-mlm"))
    return hf, d


@pytest.mark.parametrize("shape", [(2, 16), (1, 7), (3, 33)])
def test_small_bert_mlm_matches_hf(mlm: tuple, shape: tuple[int, int]) -> None:
    hf, d = mlm
    model = ours("models/bert.alg", d)
    x = tokens(*shape, vocab=SMALL["vocab_size"], seed=shape[1])
    got = model.run(x=x)["Y"]
    with torch.no_grad():
        want = hf(torch.from_numpy(x)).logits.numpy()
    assert np.abs(log_softmax(got) - log_softmax(want)).max() <= 1e-4


def test_encoder_entry_of_an_mlm_checkpoint(mlm: tuple) -> None:
    hf, d = mlm
    model = ours("models/bert.alg", d, entry="BERTEncoder")
    x = tokens(2, 16, vocab=SMALL["vocab_size"])
    with torch.no_grad():
        want = hf.bert(torch.from_numpy(x)).last_hidden_state.numpy()
    assert np.abs(model.run(x=x)["X_hat"] - want).max() <= 1e-4


def test_small_bert_model_hidden_states(tmp_path) -> None:
    torch.manual_seed(2)
    hf = _perturb(BertModel(BertConfig(**SMALL)))
    d = save_hf(hf, tmp_path)
    model = ours("models/bert.alg", d, entry="BERTEncoder")
    x = tokens(2, 16, vocab=SMALL["vocab_size"], seed=3)
    with torch.no_grad():
        want = hf(torch.from_numpy(x)).last_hidden_state.numpy()
    got = model.run(x=x)["X_hat"]
    assert got.shape == (2, 16, 32)
    assert np.abs(got - want).max() <= 1e-4


def test_bert_base_size_matches_hf(tmp_path) -> None:
    """The real bert-base hyperparameters (110M parameters), random weights."""
    torch.manual_seed(3)
    hf = _perturb(BertForMaskedLM(BertConfig()))
    d = save_hf(hf, tmp_path)
    model = ours("models/bert.alg", d)
    assert model.config.hyperparameters["d_e"] == 768
    x = tokens(2, 16, vocab=30522, seed=5)
    with torch.no_grad():
        want = hf(torch.from_numpy(x)).logits.numpy()
    assert np.abs(log_softmax(model.run(x=x)["Y"]) - log_softmax(want)).max() <= 1e-4
