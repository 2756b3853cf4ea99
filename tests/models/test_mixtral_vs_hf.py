"""Mixtral against HF's MixtralForCausalLM with the same random weights (norms perturbed), at a tiny size with
8 experts, top-2 routing and a sliding window shorter than the sequences: log-probabilities within 1e-4 on the
numpy interpreter, ONNX Runtime and TVM; one attention per layer and the routing computed sparsely; greedy
generation equal to HF generate() for 32 tokens (a prompt and a batch, with attention_mask) on ORT, the
interpreter and TVM, through the derived key/value cache."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

import pytest
import torch
from transformers import MixtralConfig, MixtralForCausalLM

from pseudoformer.deploy import lower, run_onnx
from pseudoformer.generation import Generator, Sampling
from pseudoformer.ir import Op
from pseudoformer.model import Model, load
from pseudoformer.optimize import optimize
from tests.generation.test_generate_llama import hf_greedy
from tests.models.hf_util import save_hf, tokens
from tests.models.test_llama_vs_hf import (  # Llama's comparisons, to 1e-4 in log-probabilities
    _close,
    _hf_logits,
)

MODEL = Path(__file__).resolve().parents[2] / "models" / "mixtral.alg"
WINDOW = 5
TINY = dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=500.0,
            num_local_experts=8, num_experts_per_tok=2, sliding_window=WINDOW, tie_word_embeddings=False,
            bos_token_id=1, eos_token_id=2)
SHAPES = [(2, 11), (1, 1), (3, 3 * WINDOW)]
NEW = 32
PROMPT = [5, 17, 3, 44, 9, 12, 30]
BATCH = [[1, 2, 3, 4, 5, 6], [60, 7, 7, 7, 8, 2], [33, 21, 13, 8, 5, 3]]
HAS_TVM = importlib.util.find_spec("tvm") is not None
BACKENDS = ["onnx", "numpy", pytest.param("tvm", marks=pytest.mark.skipif(
    not HAS_TVM, reason="apache-tvm is not installed: pip install pseudoformer[tvm]"))]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Model]:
    torch.manual_seed(0)
    hf = MixtralForCausalLM(MixtralConfig(**TINY)).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.2)
    directory = save_hf(hf, tmp_path_factory.mktemp("mixtral"))
    return hf, load(MODEL, weights=directory)


def test_the_routes_differ_between_tokens(checkpoint) -> None:
    """The case exercises routing: the tokens of a sequence do not all pick the same two experts."""
    hf, _ = checkpoint
    x = tokens(2, 11, vocab=TINY["vocab_size"], seed=13)
    with torch.no_grad():
        h = hf.model.embed_tokens(torch.from_numpy(x))
        logits, _, routes = hf.model.layers[0].mlp.gate(hf.model.layers[0].post_attention_layernorm(h))
    assert len({tuple(sorted(r)) for r in routes.tolist()}) > 3


def test_logits_match_hf_on_the_interpreter_and_onnx_runtime(checkpoint) -> None:
    hf, model = checkpoint
    onnx = lower(model)
    for shape in SHAPES:
        x = tokens(*shape, vocab=TINY["vocab_size"], seed=sum(shape))
        want = _hf_logits(hf, x)
        _close(model.run(x=x)["Y"], want)
        _close(run_onnx(onnx, {"x": x})["Y"], want)


@pytest.mark.skipif(not HAS_TVM, reason="apache-tvm is not installed: pip install pseudoformer[tvm]")
def test_logits_match_hf_on_tvm(checkpoint) -> None:
    from pseudoformer.deploy_tvm import compile_model

    hf, model = checkpoint
    compiled = compile_model(model)
    for shape in SHAPES:
        x = tokens(*shape, vocab=TINY["vocab_size"], seed=sum(shape))
        _close(compiled.run(x=x)["Y"], _hf_logits(hf, x))


def test_one_attention_per_layer_and_the_experts_routed_sparsely(checkpoint) -> None:
    """Each layer: one Attention (windowed), two RMS norms, one TopK pair; its expert products are two
    expert_matmuls by the routes (the gate and up experts packed under one SwiGLU) (no expert matrix gathered per token, no product over all E experts)."""
    _, model = checkpoint
    layers = TINY["num_hidden_layers"]
    graph = optimize(model.graph, 2)
    products = [n for n in graph.nodes() if n.op is Op.EXPERT_MATMUL]
    assert len(products) == 2 * layers and all(n.src[1].op is Op.TOPK for n in products)  # gate+up packed, down
    assert sum(n.op is Op.SWIGLU for n in graph.nodes()) == layers
    assert not [n for n in graph.nodes() if n.op is Op.GATHER and n.src[0].type.rank == 3]
    ops = Counter(n.op_type for n in lower(model).graph.node)
    assert ops["Attention"] == layers and ops["RMSNormalization"] == 2 * layers + 1
    assert ops["TopK"] == 2 * layers and ops["Softmax"] == layers  # the gates' softmax over the k scores


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_equals_hf_generate(checkpoint, backend: str) -> None:
    hf, model = checkpoint
    gen = Generator(model, backend=backend)
    assert gen.decoder is not None  # through the derived key/value cache
    greedy = Sampling(temperature=0)
    assert len(PROMPT) > WINDOW  # the prompt is longer than the window, which slides on as tokens come
    assert gen.generate(PROMPT, max_new_tokens=NEW, sampling=greedy).tokens == hf_greedy(hf, [PROMPT], NEW)
    assert gen.generate(BATCH, max_new_tokens=NEW, sampling=greedy).tokens == hf_greedy(hf, BATCH, NEW)


def test_int4_quantizes_the_attention_and_says_the_experts_stay_float(checkpoint) -> None:
    """--quantize int4: the projections and the unembedding become MatMulNBits; the experts' grouped products
    have no quantized form, which `inspect --refusals` says at each expert product's line, not silently."""
    from pseudoformer.backends.options import CompileOptions
    from pseudoformer.optimize import refusals
    from pseudoformer.quantization import options

    hf, model = checkpoint
    ops = Counter(n.op_type for n in lower(model, quantize="int4").graph.node)
    assert ops["MatMulNBits"] >= 2 * TINY["num_hidden_layers"] + 1
    notes = [r for r in refusals(model.graph, 2, compile_options=CompileOptions(opt_level=2, quantize=options("int4")),
                                 weights=model.weights) if "quantize" in r.message]
    assert len(notes) == 2 and all("experts' matrices stay float" in r.message for r in notes), notes
    x = tokens(2, 11, vocab=TINY["vocab_size"], seed=3)
    got = run_onnx(lower(model, quantize="int4"), {"x": x})["Y"]
    assert (got.argmax(-1) == _hf_logits(hf, x).argmax(-1)).mean() > 0.6  # 4-bit attention, float experts
