"""`generate --dtype float16` (generation/precision.py): the decoder in half precision, its cache in it.

On the CPU: tiny GPT-2 and Llama (grouped key/value heads) give the fp32 run's greedy tokens, with the first
step's scores within fp16's rounding of the fp32 ones, cached, uncached and with --contrib-ops; the cache's
buffers and values are fp16; the real SmolLM2 (where its GGUF file is named) still answers "Paris". On CUDA
(`pytest -m cuda`): the fp16 tokens equal the CPU's fp32 tokens."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from pseudoformer.cli import main
from pseudoformer.generation.api import prepare
from pseudoformer.generation.sampling import Sampling
from tests.cli.test_cli import assert_user_error
from tests.gpu.cuda import cuda

MODELS = Path(__file__).resolve().parents[2] / "models"
GPT2 = ["L=2", "H=2", "d_e=16", "d_mlp=32", "d_attn=8", "d_mid=8", "ell_max=64", "N_V=50", "eps=1e-5"]
LLAMA = ["L=2", "H=4", "H_kv=2", "d_e=32", "d_mlp=48", "d_attn=8", "N_V=60", "eps=1e-5"]
PROMPT = [[4, 5, 6], [7, 8, 9]]
CASES = {"gpt2": ("gpt2.alg", GPT2), "llama": ("llama.alg", LLAMA)}


def _generate(name: str, dtype: str, provider: str = "cpu", **options: object):  # type: ignore[no-untyped-def]
    alg, defines = CASES[name]
    prepared = prepare(MODELS / alg, defines=defines, seed=3, dtype=dtype, provider=provider, **options)
    out = prepared.generator.generate(PROMPT, max_new_tokens=10, keep_scores=True, sampling=Sampling(temperature=0))
    return prepared.generator, out


@pytest.mark.filterwarnings("ignore::pseudoformer.base.errors.ContribFallbackWarning")
@pytest.mark.parametrize("options", [{}, {"contrib_ops": True}, {"cache": False}], ids=["cache", "contrib", "uncached"])
@pytest.mark.parametrize("name", CASES)
def test_float16_gives_the_float32_tokens(name: str, options: dict) -> None:
    _, want = _generate(name, "float32", **options)
    generator, got = _generate(name, "float16", **options)
    assert got.tokens == want.tokens
    first, ref = got.scores[0], want.scores[0]
    assert first.dtype == np.float16
    scale = float(np.abs(ref).max())
    assert np.abs(first.astype(np.float32) - ref).max() <= 2e-3 * max(1.0, scale)
    if options.get("cache", True):
        assert all(s.key_type.dtype.value == "float16" for s in generator.decoder.slots)


def test_the_cache_is_float16_on_the_device() -> None:
    generator, _ = _generate("llama", "float16")
    runtime = generator.runtime
    _, cache = runtime.prefill({"x": np.array(PROMPT, np.int64)})
    values = [v for v in cache.values() if hasattr(v, "data_type")]
    assert values and all(v.data_type() == "tensor(float16)" for v in values)


def test_float16_is_the_onnx_backend_s(cli) -> None:  # type: ignore[no-untyped-def]
    base = ["generate", str(MODELS / "gpt2.alg"), *[a for d in GPT2 for a in ("-D", d)], "--prompt-ids", "1 2",
            "--max-new-tokens", "2"]
    assert_user_error(cli(*base, "--backend", "numpy", "--dtype", "float16"), "is for the onnx backend")
    assert_user_error(cli(*base, "--dtype", "float8"), "unknown dtype 'float8'")


SMOLLM2 = os.environ.get("PSEUDOFORMER_SMOLLM2_GGUF")
CHAT = "<|im_start|>user\nWhat is the capital of France? Answer in one word.<|im_end|>\n<|im_start|>assistant\n"


def _smollm2_answer(capsys: pytest.CaptureFixture[str], *extra: str) -> list[str]:
    capsys.readouterr()
    assert main(["generate", str(MODELS / "llama.alg"), "--weights", str(SMOLLM2), "--prompt", CHAT,
                 "--max-new-tokens", "8", "--temperature", "0", "--tokenizer", str(SMOLLM2), *extra]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.skipif(not SMOLLM2, reason="no SmolLM2 GGUF: set PSEUDOFORMER_SMOLLM2_GGUF")
def test_smollm2_in_float16_answers_paris(capsys: pytest.CaptureFixture[str]) -> None:
    want = _smollm2_answer(capsys)
    assert "Paris" in want[1]
    assert _smollm2_answer(capsys, "--dtype", "float16") == want


@cuda
@pytest.mark.skipif(not SMOLLM2, reason="no SmolLM2 GGUF: set PSEUDOFORMER_SMOLLM2_GGUF")
def test_smollm2_in_float16_on_cuda_answers_as_the_cpu_in_float32(capsys: pytest.CaptureFixture[str]) -> None:
    want = _smollm2_answer(capsys)
    assert "Paris" in want[1]
    assert _smollm2_answer(capsys, "--dtype", "float16", "--provider", "cuda") == want
    assert _smollm2_answer(capsys, "--dtype", "float16", "--provider", "cuda", "--contrib-ops") == want


@cuda
@pytest.mark.filterwarnings("ignore::pseudoformer.base.errors.ContribFallbackWarning")
@pytest.mark.parametrize("options", [{}, {"contrib_ops": True}], ids=["cache", "contrib"])
@pytest.mark.parametrize("name", CASES)
def test_float16_on_cuda_gives_the_cpu_s_float32_tokens(name: str, options: dict) -> None:
    _, want = _generate(name, "float32", **options)
    generator, got = _generate(name, "float16", provider="cuda", **options)
    assert generator.runtime.device == "cuda"
    assert got.tokens == want.tokens
