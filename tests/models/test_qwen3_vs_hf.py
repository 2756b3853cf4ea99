"""Qwen3 (models/qwen3.alg) against HF's Qwen3ForCausalLM with the same random weights: log-probabilities within
1e-4 on the interpreter, ONNX Runtime and TVM, greedy generation equal to HF's, one attention op per layer with
the q/k norms batched over the heads, and the options. The checks every family shares (logits on three backends,
greedy generation, the cache) are in test_gemma_qwen3_vs_hf.py; the fixtures in conftest.py."""

from __future__ import annotations

import pytest
import torch

from pseudoformer.deploy import lower, run_onnx
from pseudoformer.model import Model
from tests.models import gemma_qwen3_cases as cases

KIND = "qwen3"


def test_each_layer_is_one_attention_with_its_q_k_norms_over_the_heads(model: Model) -> None:
    """Causal attention over the batched heads, the q/k norms RMSNormalization over each head's coordinates
    (two a layer, beside the two around the sub-layers); packed Q/K/V and gate+up; no Softmax, no per-head op."""
    hp = model.config.hyperparameters
    layers = hp["L"]
    att = cases.attentions(model)
    assert [(a.attrs.get("window", 0), a.attrs["causal"], a.src[0].type.shape[1]) for a in att] == \
        [(0, True, hp["H"])] * layers
    ops = cases.onnx_ops(model)
    assert ops["Attention"] == layers and ops["Softmax"] == 0
    assert ops["RMSNormalization"] == 4 * layers + 1 and ops["RotaryEmbedding"] == 2 * layers
    assert ops["MatMul"] == 4 * layers + 1 and ops["Split"] == layers


def test_the_q_k_norms_matter(model: Model) -> None:
    """The same weights without the q/k norms (HF's model with them replaced by identities) give other logits."""
    hf = cases.hf_model(KIND)  # the checkpoint's weights: same seed
    for layer in hf.model.layers:
        layer.self_attn.q_norm, layer.self_attn.k_norm = torch.nn.Identity(), torch.nn.Identity()
    x = cases.tokens(2, 11, vocab=cases.TINY["vocab_size"], seed=13)
    with pytest.raises(AssertionError):
        cases.assert_close(cases.hf_logits(hf, x), model.run(x=x)["Y"])


def test_int4_and_contrib_ops(model: Model) -> None:
    cases.check_quantized_and_contrib(model)


def test_contrib_ops_take_the_normed_heads_whole() -> None:
    """The q/k norms pack with the heads (an RMSNormalization over [batch, seq, H, d] between two reshapes), so
    GroupQueryAttention takes every layer, with the rotation inside when d is a multiple of 16 (at d = 8
    RotaryEmbedding stays outside); the logits equal the standard file's (test_int4_and_contrib_ops at d = 8)."""
    import warnings

    import numpy as np

    from pseudoformer.model import load

    for d, rotary in ((16, 0), (8, 4)):
        model = load("models/qwen3.alg", defines=["L=2", "d_e=32", "H=4", "H_kv=2", f"d_attn={d}", "d_mlp=48",
                                                  "N_V=61"])
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no layer falls back, so nothing is said
            contrib = lower(model, contrib_ops=True)
        ops = cases.Counter(n.op_type for n in contrib.graph.node)
        assert ops["GroupQueryAttention"] == 2 and ops["Attention"] == 0 and ops["RotaryEmbedding"] == rotary
        x = cases.tokens(2, 9, vocab=61, seed=2)
        np.testing.assert_allclose(run_onnx(contrib, {"x": x})["Y"], model.run(x=x)["Y"], rtol=1e-5, atol=1e-5)
