"""Greedy generation with Llama, Mistral and Qwen2 against HF generate(): 32 tokens, one prompt and a batch
of prompts of equal length, on ONNX Runtime, the interpreter and TVM. The positions RoPE rotates by
continue after the prompt (a token off would change the next one), Mistral's window slides past the
prompt, and the derived key/value cache holds the H_kv key/value heads, not H."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from pseudoformer.generation import Generator, Sampling
from tests.models.hf_util import save_hf
from tests.models.llama_cases import KINDS, SOURCES, TINY, WINDOW, hf_model, ours

NEW = 32
PROMPT = [5, 17, 3, 44, 9, 12, 30]
BATCH = [[1, 2, 3, 4, 5, 6], [60, 7, 7, 7, 8, 2], [33, 21, 13, 8, 5, 3]]
BACKENDS = ["onnx", "numpy", pytest.param("tvm", marks=pytest.mark.skipif(
    importlib.util.find_spec("tvm") is None, reason="apache-tvm is not installed: pip install pseudoformer[tvm]"))]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = {}
    for i, kind in enumerate(KINDS):
        hf = hf_model(kind, seed=10 + i)
        out[kind] = hf, save_hf(hf, tmp_path_factory.mktemp(f"{kind}-gen"))
    return out


def hf_greedy(hf: torch.nn.Module, prompts: list[list[int]], n: int) -> list[list[int]]:
    x = torch.tensor(prompts)
    with torch.no_grad():
        out = hf.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n, min_new_tokens=n,
                          eos_token_id=None, pad_token_id=0)
    return out[:, x.shape[1]:].tolist()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("kind", KINDS)
def test_greedy_equals_hf_generate(checkpoints: dict, kind: str, source: str, backend: str) -> None:
    hf, directory = checkpoints[kind]
    gen = Generator(ours(kind, directory, source), backend=backend)
    greedy = Sampling(temperature=0)
    assert len(PROMPT) + NEW > 2 * WINDOW  # Mistral's window has slid well past the prompt
    assert gen.generate(PROMPT, max_new_tokens=NEW, sampling=greedy).tokens == hf_greedy(hf, [PROMPT], NEW)
    assert gen.generate(BATCH, max_new_tokens=NEW, sampling=greedy).tokens == hf_greedy(hf, BATCH, NEW)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("kind", KINDS)
def test_the_cache_holds_the_key_value_heads(checkpoints: dict, kind: str, source: str) -> None:
    _, directory = checkpoints[kind]
    gen = Generator(ours(kind, directory, source), backend="numpy")
    assert gen.decoder is not None and len(gen.decoder.slots) == TINY["num_hidden_layers"]
    for slot in gen.decoder.slots:
        for t in (slot.key_type, slot.value_type):
            assert t.shape[1] == TINY["num_key_value_heads"] and t.shape[-1] == TINY["head_dim"]


@pytest.mark.parametrize("source", SOURCES)
def test_cached_decoding_gives_the_logits_of_the_whole_sequence(checkpoints: dict, source: str) -> None:
    """The step graph's positions continue after the cached ones: its logits are those of running the whole
    sequence again, as the algorithm is written."""
    _, directory = checkpoints["mistral"]
    model = ours("mistral", directory, source)
    runs = [Generator(model, backend="onnx", cache=cache).generate(
        BATCH, max_new_tokens=12, seed=3, sampling=Sampling(temperature=0.8), keep_scores=True) for cache in (True, False)]
    assert runs[0].tokens == runs[1].tokens
    assert max(np.abs(a - b).max() for a, b in zip(runs[0].scores, runs[1].scores, strict=True)) <= 1e-4


def test_generate_command_with_a_text_prompt_equals_hf(checkpoints: dict, tmp_path, capsys) -> None:
    """`pseudoformer generate models/llama.alg --weights DIR --prompt TEXT`: the checkpoint's tokenizer.json
    encodes the prompt (its post-processor adding the start token), and the greedy ids are HF's."""
    tokenizers = pytest.importorskip("tokenizers", reason="--prompt uses the tokenizers package")
    from pseudoformer.cli import main

    hf, _ = checkpoints["llama"]
    hf.save_pretrained(tmp_path)
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({f"w{i}": i for i in range(TINY["vocab_size"])},
                                                           unk_token="w0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.post_processor = tokenizers.processors.TemplateProcessing(single="w1 $A", special_tokens=[("w1", 1)])
    tok.save(str(tmp_path / "tokenizer.json"))
    assert main(["generate", "models/llama.alg", "--weights", str(tmp_path), "--prompt", "w7 w30 w9",
                 "--max-new-tokens", "8", "--temperature", "0"]) == 0
    ids, text = capsys.readouterr().out.splitlines()
    want = hf_greedy(hf, [[1, 7, 30, 9]], 8)[0]
    assert ids.split() == [str(i) for i in want]
    assert text.split() == [f"w{i}" for i in want]
