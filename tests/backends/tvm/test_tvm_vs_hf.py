"""GPT-2 and BERT compiled by `pseudoformer.compile(backend="tvm")` with HuggingFace's random weights, against HF.

Small configs, one compiled module each, checked at three batch/sequence sizes to 1e-4.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tvm_util import BACKENDS  # noqa: F401  (skips this module without TVM, and finds the cases)

from hf_cases import BERT, BERT_SMALL, GPT2, GPT2_SMALL, SIZES, small_bert_mlm, small_gpt2  # isort: skip

from pseudoformer.deploy import compile
from pseudoformer.deploy_tvm import TVMCompiledModel
from tests.models.hf_util import log_softmax, save_hf, tokens

TOL = 1e-4


def _hf_logits(hf: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return hf(torch.from_numpy(x)).logits.numpy()


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    hf = small_gpt2()
    return hf, compile(GPT2, weights=save_hf(hf, tmp_path_factory.mktemp("gpt2-hf")), backend="tvm")


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    hf = small_bert_mlm()
    d = save_hf(hf, tmp_path_factory.mktemp("bert-hf"))
    return hf, compile(BERT, weights=d, backend="tvm"), compile(BERT, weights=d, entry="BERTEncoder", backend="tvm")


@pytest.mark.parametrize("shape", SIZES)
def test_gpt2_logits_match_hf(gpt2: tuple, shape: tuple[int, int]) -> None:
    hf, compiled = gpt2
    assert isinstance(compiled, TVMCompiledModel)
    x = tokens(*shape, vocab=GPT2_SMALL["vocab_size"], seed=sum(shape))
    got, want = compiled.run(x=x)["Y"], _hf_logits(hf, x)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= TOL
    assert np.abs(log_softmax(got) - log_softmax(want)).max() <= TOL


@pytest.mark.parametrize("shape", SIZES)
def test_bert_mlm_logits_and_hidden_states_match_hf(bert: tuple, shape: tuple[int, int]) -> None:
    hf, mlm, encoder = bert
    x = tokens(*shape, vocab=BERT_SMALL["vocab_size"], seed=sum(shape))
    got, want = mlm.run(x=x)["Y"], _hf_logits(hf, x)
    assert np.abs(log_softmax(got) - log_softmax(want)).max() <= TOL
    with torch.no_grad():
        hidden = hf.bert(torch.from_numpy(x)).last_hidden_state.numpy()
    assert np.abs(encoder.run(x=x)["X_hat"] - hidden).max() <= TOL


def test_the_big_matmuls_run_on_packed_weights(gpt2: tuple) -> None:
    _, compiled = gpt2
    params = compiled.compiled.meta["params"]
    # The tied unembedding and every layer's projections are packed; the embedding table (a
    # gather's operand) is not.
    assert "W_e#packed" in params
    assert sum(p.endswith("#packed") for p in params) >= 4 * GPT2_SMALL["n_layer"]
