"""Greedy generation with GPT-NeoX and Phi-3 against HF generate(): 32 tokens, one prompt and a batch of prompts
of equal length, on ONNX Runtime, the interpreter and TVM; Phi-3's prompt is longer than its window. The derived
key/value cache holds every head (NeoX) or the H_kv key/value heads (Phi-3); --contrib-ops (GroupQueryAttention,
NeoX's partial rotation left outside the kernel as RotaryEmbedding) and --quantize int4 generate what the
standard decoder does."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from pseudoformer.generation import Generator, Sampling
from pseudoformer.passes.quantize import QuantizeOptions
from tests.generation.test_generate_llama import BACKENDS, BATCH, NEW, PROMPT, hf_greedy
from tests.models.hf_util import save_hf
from tests.models.neox_phi3_cases import KINDS, TINY, WINDOW, hf_model, ours


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = {}
    for i, kind in enumerate(KINDS):
        hf = hf_model(kind, seed=30 + i)
        out[kind] = hf, save_hf(hf, tmp_path_factory.mktemp(f"{kind}-gen"))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", KINDS)
def test_greedy_equals_hf_generate(checkpoints: dict, kind: str, backend: str) -> None:
    hf, directory = checkpoints[kind]
    gen = Generator(ours(kind, directory), backend=backend)
    greedy = Sampling(temperature=0)
    assert len(PROMPT) > WINDOW  # Phi-3's window already hides part of the prompt
    assert gen.generate(PROMPT, max_new_tokens=NEW, sampling=greedy).tokens == hf_greedy(hf, [PROMPT], NEW)
    assert gen.generate(BATCH, max_new_tokens=NEW, sampling=greedy).tokens == hf_greedy(hf, BATCH, NEW)


@pytest.mark.parametrize("kind", KINDS)
def test_the_cache_holds_the_key_value_heads(checkpoints: dict, kind: str) -> None:
    _, directory = checkpoints[kind]
    gen = Generator(ours(kind, directory), backend="numpy")
    config = TINY[kind]
    heads = config.get("num_key_value_heads", config["num_attention_heads"])
    assert gen.decoder is not None and len(gen.decoder.slots) == config["num_hidden_layers"]
    for slot in gen.decoder.slots:
        for t in (slot.key_type, slot.value_type):
            assert t.shape[1] == heads and t.shape[-1] == config["hidden_size"] // config["num_attention_heads"]


@pytest.mark.parametrize("kind", KINDS)
def test_contrib_ops_generate_what_the_standard_decoder_does(checkpoints: dict, kind: str) -> None:
    _, directory = checkpoints[kind]
    model = ours(kind, directory)
    plain, fast = Generator(model), Generator(model, contrib_ops=True)
    assert fast.runtime.buffered
    ops = Counter(n.op_type for n in fast.runtime.step_model.graph.node)
    layers = TINY[kind]["num_hidden_layers"]
    assert ops["GroupQueryAttention"] == layers and ops["Attention"] == 0
    # NeoX's partial rotation stays outside the kernel; Phi-3's whole-head one (d = 16) goes inside
    assert ops["RotaryEmbedding"] == (2 * layers if kind == "gpt_neox" else 0)
    x = np.random.default_rng(4).integers(0, 61, (2, 9))
    a, b = (g.generate(x, max_new_tokens=12, keep_scores=True, seed=0) for g in (plain, fast))
    assert a.tokens == b.tokens
    assert max(np.abs(u - v).max() for u, v in zip(a.scores, b.scores, strict=True)) < 1e-4


@pytest.mark.parametrize("kind", KINDS)
def test_int4_generation_with_and_without_contrib_ops(checkpoints: dict, kind: str) -> None:
    """int4 weights change the logits a little (so no comparison with HF here); with and without the kernels
    the quantized decoder generates the same tokens, and stays close to the float one's first scores."""
    _, directory = checkpoints[kind]
    model = ours(kind, directory)
    opts = QuantizeOptions(bits=4, block_size=16, symmetric=True)
    plain, fast = Generator(model, quantize=opts), Generator(model, quantize=opts, contrib_ops=True)
    x = np.random.default_rng(5).integers(0, 61, (1, 8))
    a, b = (g.generate(x, max_new_tokens=10, keep_scores=True, seed=0) for g in (plain, fast))
    assert a.tokens == b.tokens
    assert max(np.abs(u - v).max() for u, v in zip(a.scores, b.scores, strict=True)) < 1e-4
    ops = Counter(n.op_type for n in plain.runtime.step_model.graph.node)
    assert ops["MatMulNBits"] >= 4 * TINY[kind]["num_hidden_layers"]
