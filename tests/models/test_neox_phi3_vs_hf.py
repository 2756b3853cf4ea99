"""GPT-NeoX (parallel residual, partial rotary, head-major packed query_key_value) and Phi-3 (packed qkv_proj and
gate_up_proj, a sliding window shorter than the sequences) against HF's GPTNeoXForCausalLM and Phi3ForCausalLM with
the same random weights: log-probabilities within 1e-4 on the interpreter, ONNX Runtime and TVM; one Attention per
layer on ONNX, no Softmax and no per-head op; and the settings each refuses, by name."""

from __future__ import annotations

from collections import Counter

import pytest

from pseudoformer.deploy import lower, run_onnx
from pseudoformer.ir import Op
from pseudoformer.optimize import optimize, refusals
from pseudoformer.weights import WeightsError, hf_hyperparameters
from tests.models.hf_util import save_hf, tokens
from tests.models.neox_phi3_cases import KINDS, TINY, VOCAB, WINDOW, hf_model, ours
from tests.models.test_llama_vs_hf import _close, _hf_logits

SHAPES = [(2, 11), (1, 1), (3, 3 * WINDOW)]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = {}
    for i, kind in enumerate(KINDS):
        hf = hf_model(kind, seed=20 + i)
        out[kind] = hf, save_hf(hf, tmp_path_factory.mktemp(kind))
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_logits_match_hf_on_the_interpreter_and_onnx_runtime(checkpoints: dict, kind: str) -> None:
    hf, directory = checkpoints[kind]
    model = ours(kind, directory)
    onnx = lower(model)
    for shape in SHAPES:
        x = tokens(*shape, vocab=VOCAB, seed=sum(shape))
        want = _hf_logits(hf, x)
        _close(model.run(x=x)["Y"], want)
        _close(run_onnx(onnx, {"x": x})["Y"], want)


@pytest.mark.parametrize("kind", KINDS)
def test_logits_match_hf_on_tvm(checkpoints: dict, kind: str) -> None:
    pytest.importorskip("tvm.relax", reason="apache-tvm is not installed: pip install pseudoformer[tvm]")
    from pseudoformer.deploy_tvm import compile_model

    hf, directory = checkpoints[kind]
    compiled = compile_model(ours(kind, directory))
    for shape in SHAPES:
        x = tokens(*shape, vocab=VOCAB, seed=sum(shape))
        _close(compiled.run(x=x)["Y"], _hf_logits(hf, x))


@pytest.mark.parametrize("kind", KINDS)
def test_each_layer_is_one_attention_without_softmax_or_per_head_ops(checkpoints: dict, kind: str) -> None:
    """One packed QKV product, one Attention and two RotaryEmbeddings over all heads per layer; NeoX's rotate
    the first r coordinates of each head (rotary_embedding_dim), and nothing is refused at -O2."""
    _, directory = checkpoints[kind]
    model = ours(kind, directory)
    graph = lower(model).graph
    ops = Counter(n.op_type for n in graph.node)
    layers = TINY[kind]["num_hidden_layers"]
    assert ops["Attention"] == layers and ops["Softmax"] == ops["Reshape"] == 0
    assert ops["RotaryEmbedding"] == 2 * layers
    assert ops["MatMul"] == 4 * layers + 1  # packed QKV, O, the MLP's two (SwiGLU's packed), the unembedding
    assert sum(n.op is Op.ATTENTION for n in optimize(model.graph, 2).nodes()) == layers
    assert refusals(model.graph, 2) == []
    dims = {a.i for n in graph.node if n.op_type == "RotaryEmbedding" for a in n.attribute
            if a.name == "rotary_embedding_dim"}
    assert dims == ({model.config.hyperparameters["r"]} if kind == "gpt_neox" else set())
    if kind == "gpt_neox":
        assert ops["LayerNormalization"] == 2 * layers + 1
        assert model.config.hyperparameters["r"] == 4  # int(16 · 0.25)
    else:
        assert ops["RMSNormalization"] == 2 * layers + 1
        windows = {a.i for n in graph.node if n.op_type == "Attention" for a in n.attribute if "window" in a.name}
        assert model.config.hyperparameters["w"] == WINDOW and windows <= {WINDOW}


def _config(kind: str, **settings: object) -> dict:
    config = dict(hf_model(kind).config.to_dict())
    config.update(settings)
    return config


def test_neox_refuses_the_sequential_residual_and_reads_old_rotary_settings() -> None:
    with pytest.raises(WeightsError, match="use_parallel_residual = false: gpt_neox.alg adds attention and the MLP"):
        hf_hyperparameters(_config("gpt_neox", use_parallel_residual=False))
    with pytest.raises(WeightsError, match="hidden_act = 'gelu_new'"):
        hf_hyperparameters(_config("gpt_neox", hidden_act="gelu_new"))
    old = {k: v for k, v in _config("gpt_neox").items() if k != "rope_parameters"}
    hp = hf_hyperparameters({**old, "rotary_pct": 0.5, "rotary_emb_base": 123.0})
    assert (hp["r"], hp["b"]) == (8, 123.0)
    with pytest.raises(WeightsError, match="rotary_pct = 1.0: gpt_neox.alg rotates a part"):
        hf_hyperparameters({**old, "rotary_pct": 1.0})


def test_phi3_refuses_longrope_by_name() -> None:
    """Phi-3.5's LongRoPE (and the older names of it): one message naming it, from config.json as HF saves it."""
    long = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 8, "long_factor": [2.0] * 8,
            "original_max_position_embeddings": 64, "partial_rotary_factor": 1.0}
    for scaling in ({"rope_parameters": long}, {"rope_parameters": None, "rope_scaling": {**long, "type": "su"}}):
        with pytest.raises(WeightsError, match="rope_scaling type '(longrope|su)' \\(LongRoPE, Phi-3.5"):
            hf_hyperparameters(_config("phi3", **scaling))
    with pytest.raises(WeightsError, match="partial_rotary_factor = 0.75: phi3.alg rotates every coordinate"):
        hf_hyperparameters(_config("phi3", rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                                            "partial_rotary_factor": 0.75}))


PYTHIA_70M = dict(vocab_size=50304, hidden_size=512, num_hidden_layers=6, num_attention_heads=8, intermediate_size=2048,
                  max_position_embeddings=2048, rotary_pct=0.25, rotary_emb_base=10000.0)


@pytest.mark.slow
def test_pythia_70m_size_matches_hf(tmp_path) -> None:
    """Pythia-70M's sizes (6 layers, d 512, 8 heads of 64, 16 of them rotated), on the interpreter and ORT."""
    hf = hf_model("gpt_neox", **PYTHIA_70M)
    model = ours("gpt_neox", save_hf(hf, tmp_path))
    assert model.config.hyperparameters["r"] == 16
    x = tokens(2, 24, vocab=PYTHIA_70M["vocab_size"], seed=5)
    want = _hf_logits(hf, x)
    _close(model.run(x=x)["Y"], want)
    _close(run_onnx(lower(model), {"x": x})["Y"], want)
