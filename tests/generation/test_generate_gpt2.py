"""Generation with GPT-2 against HuggingFace generate(), and cached against uncached decoding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from pseudoformer.base.errors import UsageError
from pseudoformer.generation import Generator, Sampling
from pseudoformer.model import load
from tests.models.test_gpt2_vs_hf import SMALL, _hf

PROMPTS = [[5, 17, 3], [42], [7, 7, 7, 7, 7, 7, 7, 7, 9, 1]]


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    hf = _hf(GPT2Config(**SMALL), seed=3)
    d = tmp_path_factory.mktemp("gpt2-gen")
    hf.save_pretrained(d)
    return hf, load("models/gpt2.alg", weights=d)


def _hf_greedy(hf: GPT2LMHeadModel, prompt: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=n, min_new_tokens=n,
                          eos_token_id=None, pad_token_id=0, attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("backend", ["onnx", "numpy"])
def test_greedy_equals_hf_generate(gpt2: tuple, backend: str) -> None:
    hf, model = gpt2
    gen = Generator(model, backend=backend)
    for prompt in PROMPTS:
        got = gen.generate(prompt, max_new_tokens=12, sampling=Sampling(temperature=0)).tokens[0]
        assert got == _hf_greedy(hf, prompt, 12), prompt


@pytest.mark.parametrize("backend", ["onnx", "numpy"])
def test_cached_and_uncached_give_the_same_tokens_and_logits(gpt2: tuple, backend: str) -> None:
    _, model = gpt2
    runs = []
    for cache in (True, False):
        gen = Generator(model, backend=backend, cache=cache)
        runs.append(gen.generate([[1, 2, 3, 4], [9, 8, 7, 6]], max_new_tokens=10, seed=4,
                                 sampling=Sampling(temperature=0.9), keep_scores=True))
    cached, full = runs
    assert cached.tokens == full.tokens
    assert len(cached.scores) == len(full.scores) == 10
    assert max(np.abs(a - b).max() for a, b in zip(cached.scores, full.scores, strict=True)) <= 1e-4


def test_seeded_sampling_is_reproducible_across_backends(gpt2: tuple) -> None:
    _, model = gpt2
    s = Sampling(temperature=1.3, top_k=20)
    a = Generator(model, backend="onnx").generate([3, 1, 4], max_new_tokens=8, sampling=s, seed=9).tokens
    b = Generator(model, backend="numpy").generate([3, 1, 4], max_new_tokens=8, sampling=s, seed=9).tokens
    c = Generator(model, backend="onnx").generate([3, 1, 4], max_new_tokens=8, sampling=s, seed=10).tokens
    assert a == b
    assert a != c


def test_end_token_stops_a_row_and_is_kept(gpt2: tuple) -> None:
    hf, model = gpt2
    gen = Generator(model, backend="onnx")
    free = gen.generate(PROMPTS[0], max_new_tokens=12, sampling=Sampling(temperature=0)).tokens[0]
    eos = free[4]
    stopped = gen.generate(PROMPTS[0], max_new_tokens=12, sampling=Sampling(temperature=0), eos_token=eos).tokens[0]
    assert stopped == free[:free.index(eos) + 1]
    with torch.no_grad():
        out = hf.generate(torch.tensor([PROMPTS[0]]), do_sample=False, max_new_tokens=12, eos_token_id=eos,
                          pad_token_id=0, attention_mask=torch.ones(1, 3, dtype=torch.long))
    assert out[0, 3:].tolist() == stopped


def test_batch_rows_stop_independently(gpt2: tuple) -> None:
    _, model = gpt2
    gen = Generator(model, backend="numpy")
    rows = gen.generate([[5, 17, 3], [1, 2, 3]], max_new_tokens=8, sampling=Sampling(temperature=0)).tokens
    eos = rows[0][2]
    stopped = gen.generate([[5, 17, 3], [1, 2, 3]], max_new_tokens=8, sampling=Sampling(temperature=0),
                           eos_token=eos).tokens
    for free, cut in zip(rows, stopped, strict=True):
        assert cut == (free[:free.index(eos) + 1] if eos in free else free)


def test_too_long_a_generation_is_refused_before_it_starts(gpt2: tuple) -> None:
    _, model = gpt2
    gen = Generator(model, backend="numpy")
    with pytest.raises(UsageError, match="positions"):
        gen.generate([1] * 60, max_new_tokens=10)  # n_positions = 64


def test_encoder_only_model_is_refused(tmp_path) -> None:
    from pseudoformer.base.errors import CompileError

    model = load("models/bert.alg", entry="BERT", defines=["L=1", "H=2", "d_e=8", "d_mlp=8", "d_attn=4", "d_mid=4",
                                                          "ell_max=16", "N_V=11", "d_f=8"])
    with pytest.raises(CompileError, match="not causal"):
        Generator(model, backend="numpy")


def test_gpt2_small_size_greedy_equals_hf(tmp_path) -> None:
    """124M parameters, prompt of 20 tokens, 8 greedy tokens through ONNX Runtime."""
    hf = GPT2LMHeadModel(GPT2Config()).eval()
    hf.save_pretrained(tmp_path)
    model = load("models/gpt2.alg", weights=tmp_path)
    prompt = np.random.default_rng(0).integers(0, 50257, size=20).tolist()
    got = Generator(model, backend="onnx").generate(prompt, max_new_tokens=8, sampling=Sampling(temperature=0))
    assert got.tokens[0] == _hf_greedy(hf, prompt, 8)


def test_tvm_backend_generates_the_same_tokens(gpt2: tuple) -> None:
    pytest.importorskip("tvm", reason="the TVM backend needs pip install pseudoformer[tvm]")
    hf, model = gpt2
    gen = Generator(model, backend="tvm")
    prompt = PROMPTS[2]
    assert gen.generate(prompt, max_new_tokens=6, sampling=Sampling(temperature=0)).tokens[0] == \
        _hf_greedy(hf, prompt, 6)
    a = gen.generate([[1, 2], [3, 4]], max_new_tokens=5, seed=2, keep_scores=True)
    b = Generator(model, backend="numpy").generate([[1, 2], [3, 4]], max_new_tokens=5, seed=2, keep_scores=True)
    assert a.tokens == b.tokens
    assert max(np.abs(x - y).max() for x, y in zip(a.scores, b.scores, strict=True)) <= 1e-4


def test_cache_needs_the_fused_attention_of_o2(gpt2: tuple) -> None:
    _, model = gpt2
    with pytest.raises(UsageError, match="-O2"):
        Generator(model, backend="numpy", opt_level=1)
    uncached = Generator(model, backend="numpy", opt_level=0, cache=False)
    assert uncached.generate([1, 2], max_new_tokens=3, sampling=Sampling(temperature=0)).tokens == \
        Generator(model, backend="numpy").generate([1, 2], max_new_tokens=3, sampling=Sampling(temperature=0)).tokens
