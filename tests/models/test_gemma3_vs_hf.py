"""Gemma 3's text decoder (models/gemma3.alg) against HF's Gemma3ForCausalLM (model_type gemma3_text) with the
same random weights: log-probabilities within 1e-4 on the interpreter, ONNX Runtime and TVM on sequences past the
window, greedy generation equal to HF's, one attention op per layer (windowed in the local ones), the q/k norms
batched over the heads, a RoPE base per kind of layer, and the options. The checks every family shares (logits on three backends,
greedy generation, the cache) are in test_gemma_qwen3_vs_hf.py; the fixtures in conftest.py."""

from __future__ import annotations

import pytest

from pseudoformer.model import Model
from tests.models import gemma_qwen3_cases as cases

KIND = "gemma3"


def test_each_layer_is_one_attention_its_kind_settled_per_layer(model: Model) -> None:
    """Every P-th layer global, the others windowed; no cap; the q/k norms are RMSNormalization over the heads
    (two a layer, beside the four around the sub-layers), no Softmax and no per-head op."""
    hp = model.config.hyperparameters
    layers, w, period = hp["L"], hp["w"], hp["P"]
    att = cases.attentions(model)
    assert [(a.attrs.get("window", 0), a.attrs.get("softcap", 0), a.attrs["causal"]) for a in att] == \
        [(0 if (i + 1) % period == 0 else w, 0, True) for i in range(layers)]
    assert [a.src[0].type.shape[1] for a in att] == [hp["H"]] * layers  # the heads batched
    ops = cases.onnx_ops(model)
    assert ops["Attention"] == layers and ops["Softmax"] == 0
    assert ops["RMSNormalization"] == 6 * layers + 1 and ops["RotaryEmbedding"] == 2 * layers
    contrib = cases.onnx_ops(model, contrib_ops=True)  # the normed heads packed: onnxruntime's kernel takes them
    assert contrib["GroupQueryAttention"] == layers and contrib["Attention"] == 0


def test_the_local_and_global_layers_rotate_by_their_own_base(checkpoint: tuple, model: Model) -> None:
    """rope_local_base_freq: the local layers' angles are a table of their own, computed once and shared by
    them, the global layers' (base b, linear scaling κ) another; and it matters: with one base for all the
    layers, HF's logits are not these."""
    hp = model.config.hyperparameters
    assert (hp["b"], hp["b_loc"], hp["kappa"]) == (2000.0, 30.0, 2.0)
    tables = [(cases.angles(a.src[0]), cases.angles(a.src[1])) for a in cases.attentions(model)]
    assert all(q is k for q, k in tables)  # queries and keys of a layer, one table
    local = {id(q) for i, (q, _) in enumerate(tables) if (i + 1) % hp["P"]}
    assert len(local) == 1 and len({id(q) for q, _ in tables}) == 2
    one_base = cases.hf_model(KIND, rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 30.0},
                                                     "sliding_attention": {"rope_type": "default", "rope_theta": 30.0}})
    one_base.load_state_dict(checkpoint[0].state_dict())
    x = cases.tokens(2, 11, vocab=cases.TINY["vocab_size"], seed=13)
    with pytest.raises(AssertionError):
        cases.assert_close(cases.hf_logits(one_base, x), model.run(x=x)["Y"])


def test_int4_and_contrib_ops(model: Model) -> None:
    cases.check_quantized_and_contrib(model)
