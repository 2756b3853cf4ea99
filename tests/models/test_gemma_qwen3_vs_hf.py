"""Gemma 2, Gemma 3 (text) and Qwen3 against HF's …ForCausalLM with the same random weights (gemma_qwen3_cases.py):
log-probabilities within 1e-4 on the interpreter, ONNX Runtime and TVM, on sequences past the sliding window,
greedy generation equal to HF's on three backends, and a cache of the key/value heads. What each family adds
(soft caps, two RoPE bases, q/k norms, the fused ops) is in its own test_<family>_vs_hf.py."""

from __future__ import annotations

import importlib.util

import pytest

from pseudoformer.deploy import lower, run_onnx
from pseudoformer.model import Model
from tests.models import gemma_qwen3_cases as cases


@pytest.fixture(scope="module", params=["gemma2", "gemma3", "qwen3"])
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    return cases.checkpoint(request.param, tmp_path_factory.mktemp(request.param)) + (request.param,)


@pytest.fixture(scope="module")
def model(checkpoint: tuple) -> Model:
    return cases.ours(checkpoint[2], checkpoint[1])


def test_logits_match_hf_on_the_interpreter_and_onnx_runtime(checkpoint: tuple, model: Model) -> None:
    onnx = lower(model)
    cases.check_logits(checkpoint[0], model, lambda x: model.run(x=x)["Y"])
    cases.check_logits(checkpoint[0], model, lambda x: run_onnx(onnx, {"x": x})["Y"])


def test_logits_match_hf_on_tvm(checkpoint: tuple, model: Model) -> None:
    pytest.importorskip("tvm.relax", reason="apache-tvm is not installed: pip install pseudoformer[tvm]")
    from pseudoformer.deploy_tvm import compile_model

    compiled = compile_model(model)
    cases.check_logits(checkpoint[0], model, lambda x: compiled.run(x=x)["Y"])


@pytest.mark.parametrize("backend", ["onnx", "numpy", pytest.param("tvm", marks=pytest.mark.skipif(
    importlib.util.find_spec("tvm") is None, reason="apache-tvm is not installed: pip install pseudoformer[tvm]"))])
def test_greedy_equals_hf_generate(checkpoint: tuple, model: Model, backend: str) -> None:
    cases.check_generate(checkpoint[0], model, backend)


def test_the_cache_holds_the_key_value_heads(model: Model) -> None:
    cases.check_cache(model)
