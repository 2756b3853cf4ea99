"""Llama, Mistral (sequences longer than its window) and Qwen2 against HF's LlamaForCausalLM,
MistralForCausalLM and Qwen2ForCausalLM with the same random weights: log-probabilities within 1e-4
on the numpy interpreter, ONNX Runtime and TVM, and the compiled ONNX's ops per layer."""

from __future__ import annotations

import importlib.util
from collections import Counter

import numpy as np
import pytest
import torch

from pseudoformer.deploy import lower, run_onnx
from pseudoformer.ir import Op
from pseudoformer.optimize import optimize
from tests.models.hf_util import log_softmax, save_hf, tokens
from tests.models.llama_cases import KINDS, SMOLLM2, SOURCES, TINY, WINDOW, hf_model, ours

TOL = 1e-4
SHAPES = [(2, 11), (1, 1), (3, 3 * WINDOW)]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = {}
    for i, kind in enumerate(KINDS):
        hf = hf_model(kind, seed=i)
        out[kind] = hf, save_hf(hf, tmp_path_factory.mktemp(kind))
    return out


def _hf_logits(hf: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return hf(torch.from_numpy(x), attention_mask=torch.ones(x.shape, dtype=torch.long)).logits.numpy()


def _close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    assert np.abs(log_softmax(got) - log_softmax(want)).max() <= TOL


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("kind", KINDS)
def test_logits_match_hf_on_the_interpreter_and_onnx_runtime(checkpoints: dict, kind: str, source: str) -> None:
    hf, directory = checkpoints[kind]
    model = ours(kind, directory, source)
    onnx = lower(model)
    for shape in SHAPES:
        x = tokens(*shape, vocab=TINY["vocab_size"], seed=sum(shape))
        want = _hf_logits(hf, x)
        _close(model.run(x=x)["Y"], want)
        _close(run_onnx(onnx, {"x": x})["Y"], want)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("kind", KINDS)
def test_logits_match_hf_on_tvm(checkpoints: dict, kind: str, source: str) -> None:
    pytest.importorskip("tvm.relax", reason="apache-tvm is not installed: pip install pseudoformer[tvm]")
    from pseudoformer.deploy_tvm import compile_model

    hf, directory = checkpoints[kind]
    compiled = compile_model(ours(kind, directory, source))
    for shape in SHAPES:
        x = tokens(*shape, vocab=TINY["vocab_size"], seed=sum(shape))
        _close(compiled.run(x=x)["Y"], _hf_logits(hf, x))


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("kind", KINDS)
def test_each_layer_is_four_matmuls_one_attention_and_two_rms_norms(checkpoints: dict, kind: str,
                                                                    source: str) -> None:
    """Packed QKV, O, packed gate+up and down; RoPE as RotaryEmbedding; no Softmax and no per-head op."""
    _, directory = checkpoints[kind]
    model = ours(kind, directory, source)
    graph = lower(model).graph
    ops = Counter(n.op_type for n in graph.node)
    layers = TINY["num_hidden_layers"]
    assert ops["MatMul"] == 4 * layers + 1  # and the unembedding
    assert ops["Attention"] == layers and ops["RMSNormalization"] == 2 * layers + 1
    assert ops["RotaryEmbedding"] == 2 * layers
    assert ops["Softmax"] == ops["Reshape"] == 0
    assert ops["Slice"] == 3 * layers and ops["Split"] == layers  # Q, K, V and gate, up out of the packed products
    # on activations: the two residuals per layer, and Qwen2's q/k/v biases packed like their projections
    adds = [n for n in optimize(model.graph, 2).nodes() if n.op is Op.ADD and n.type.rank == 3]
    assert len(adds) == (3 if kind == "qwen2" else 2) * layers
    attention = [n for n in graph.node if n.op_type == "Attention"]
    heads = {(a.name, a.domain, tuple((x.name, x.i) for x in a.attribute if x.name.endswith("num_heads")))
             for a in attention}
    assert {h[2] for h in heads} == {(("kv_num_heads", 2), ("q_num_heads", 4))}


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES)
def test_smollm2_size_matches_hf(tmp_path, source: str) -> None:
    """SmolLM2-135M's sizes (30 layers, d 576, 9 query heads over 3 key/value heads, tied unembedding), on the
    interpreter, ORT and (where installed) TVM."""
    hf = hf_model("llama", **SMOLLM2)
    model = ours("llama", save_hf(hf, tmp_path), source)
    assert (model.config.hyperparameters["H"], model.config.hyperparameters["H_kv"]) == (9, 3)
    x = tokens(2, 24, vocab=SMOLLM2["vocab_size"], seed=5)
    want = _hf_logits(hf, x)
    _close(model.run(x=x)["Y"], want)
    _close(run_onnx(lower(model), {"x": x})["Y"], want)
    if importlib.util.find_spec("tvm") is not None:
        from pseudoformer.deploy_tvm import compile_model

        _close(compile_model(model).run(x=x)["Y"], want)


def test_linear_rope_scaling_divides_the_positions(tmp_path) -> None:
    """rope_scaling {"rope_type": "linear", "factor": κ}: RoPE's κ (models/variants.alg), against HF."""
    hf = hf_model("llama", rope_scaling={"rope_type": "linear", "factor": 4.0})
    model = ours("llama", save_hf(hf, tmp_path), "alg")
    assert model.config.hyperparameters["kappa"] == 4.0
    x = tokens(2, 11, vocab=TINY["vocab_size"], seed=3)
    want = _hf_logits(hf, x)
    _close(model.run(x=x)["Y"], want)
    _close(run_onnx(lower(model), {"x": x})["Y"], want)


LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}


def test_llama3_rope_scaling_matches_hf_in_all_three_bands(tmp_path) -> None:
    """Llama 3's rope_scaling: short wavelengths kept, long ones divided by κ, those between blended."""
    d, theta = TINY["head_dim"], TINY["rope_theta"]
    wavelengths = 2 * np.pi * theta ** (np.arange(0, d, 2) / d)
    ell_0 = LLAMA3["original_max_position_embeddings"]
    short = wavelengths < ell_0 / LLAMA3["high_freq_factor"]
    long = wavelengths > ell_0 / LLAMA3["low_freq_factor"]
    assert short.any() and long.any() and (~short & ~long).any(), "the case must reach all three bands"
    hf = hf_model("llama", rope_scaling=LLAMA3)
    model = ours("llama", save_hf(hf, tmp_path), "alg")
    hp = model.config.hyperparameters
    assert (hp["kappa"], hp["ell_0"], hp["alpha"], hp["beta"]) == (8.0, 64.0, 1.0, 4.0)
    x = tokens(2, 40, vocab=TINY["vocab_size"], seed=4)
    want = _hf_logits(hf, x)
    _close(model.run(x=x)["Y"], want)
    _close(run_onnx(lower(model), {"x": x})["Y"], want)
