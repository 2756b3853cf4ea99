"""Encoder–decoder generation (Algorithm 15's loop) with BART against HuggingFace generate()."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import BartConfig, BartForConditionalGeneration

from pseudoformer.generation import Generator, Sampling
from pseudoformer.model import load
from tests.models.test_bart_vs_hf import SMALL, _hf

START, EOS = 2, 2  # BART decodes from </s>
CONTEXTS = [[5, 6, 7, 8, 9], [11, 3], [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51]]


@pytest.fixture(scope="module")
def bart(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    # init_std 0.3: with BART's default 0.02 a random model's logits are its bias, the same every step
    config = BartConfig(**SMALL, bos_token_id=0, eos_token_id=EOS, decoder_start_token_id=START, pad_token_id=1,
                        forced_bos_token_id=None, forced_eos_token_id=None, init_std=0.3)
    hf = _hf(BartForConditionalGeneration, config, seed=1)
    d = tmp_path_factory.mktemp("bart-gen")
    hf.save_pretrained(d)
    return hf, load("models/bart.alg", weights=d)


def _hf_greedy(hf: BartForConditionalGeneration, z: list[int], n: int, eos: int | None) -> list[int]:
    with torch.no_grad():
        out = hf.generate(torch.tensor([z]), do_sample=False, num_beams=1, max_new_tokens=n, eos_token_id=eos,
                          no_repeat_ngram_size=0, attention_mask=torch.ones(1, len(z), dtype=torch.long),
                          **({"min_new_tokens": n} if eos is None else {}))
    return out[0, 1:].tolist()  # without the start token


@pytest.mark.parametrize("backend", ["onnx", "numpy"])
def test_greedy_equals_hf_generate(bart: tuple, backend: str) -> None:
    hf, model = bart
    gen = Generator(model, decoder_input="x", encoder_input="z", backend=backend)
    for z in CONTEXTS:
        got = gen.generate([START], max_new_tokens=8, sampling=Sampling(temperature=0), encoder_inputs={"z": [z]})
        assert got.tokens[0] == _hf_greedy(hf, z, 8, None), z


def test_end_token_stops_as_in_hf(bart: tuple) -> None:
    hf, model = bart
    gen = Generator(model, decoder_input="x", encoder_input="z", backend="onnx")
    z = CONTEXTS[0]
    free = gen.generate([START], max_new_tokens=8, sampling=Sampling(temperature=0), encoder_inputs={"z": [z]})
    eos = free.tokens[0][0]
    got = gen.generate([START], max_new_tokens=8, sampling=Sampling(temperature=0), eos_token=eos,
                       encoder_inputs={"z": [z]})
    assert got.tokens[0] == [eos] == _hf_greedy(hf, z, 8, eos)


@pytest.mark.parametrize("backend", ["onnx", "numpy"])
def test_cached_and_uncached_agree_while_sampling(bart: tuple, backend: str) -> None:
    _, model = bart
    runs = [Generator(model, decoder_input="x", encoder_input="z", backend=backend, cache=cache).generate(
        [[START], [START]], max_new_tokens=8, sampling=Sampling(temperature=1.0), seed=3, keep_scores=True,
        encoder_inputs={"z": [CONTEXTS[0], CONTEXTS[0][::-1]]}) for cache in (True, False)]
    assert runs[0].tokens == runs[1].tokens
    assert max(np.abs(a - b).max() for a, b in zip(runs[0].scores, runs[1].scores, strict=True)) <= 1e-4


def test_cross_attention_keys_and_values_are_computed_once(bart: tuple) -> None:
    _, model = bart
    gen = Generator(model, decoder_input="x", encoder_input="z", backend="numpy")
    assert gen.decoder is not None and gen.decoder.encoder is not None
    assert len(gen.decoder.encoder.outputs) == 2 * model.graph.meta["hyperparameters"]["L_dec"]
    assert "z" not in [n.attrs["name"] for n in gen.decoder.step.inputs]


def test_bart_alg_edinference_through_the_api(bart: tuple, tmp_path_factory: pytest.TempPathFactory) -> None:
    """models/bart.alg's own Algorithm 15b, settings from the checkpoint (start 2, end 2), as HF generate."""
    import pseudoformer

    hf, model = bart
    for z in CONTEXTS:
        got = pseudoformer.generate("models/bart.alg", weights=model.weights_source, encoder_ids=z,
                                    max_new_tokens=8, temperature=0)
        assert got == _hf_greedy(hf, z, 8, EOS), z
