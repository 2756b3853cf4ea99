"""Gemma 2, Gemma 3 (text) and Qwen3 checkpoints: config fields (both config styles of Gemma 3's two RoPEs, the
layer pattern), the tensors only these families have, tying, and the settings their .alg files cannot honour,
each refused by name. Their numbers against HF: tests/models/test_{gemma2,gemma3,qwen3}_vs_hf.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import Gemma2Config, Gemma3ForCausalLM, Gemma3TextConfig, Qwen3Config, Qwen3ForCausalLM

import pseudoformer
from pseudoformer.weights import WeightsError, hf_hyperparameters

SIZES = dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=6, num_attention_heads=4,
             num_key_value_heads=2, head_dim=8, max_position_embeddings=128, rms_norm_eps=1e-5)


def _state(model: torch.nn.Module, directory: Path) -> dict[str, np.ndarray]:
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p))
    model.save_pretrained(directory)
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def test_gemma2_hyperparameters() -> None:
    hp = hf_hyperparameters(Gemma2Config(**SIZES, sliding_window=7, query_pre_attn_scalar=12,
                                         attn_logit_softcapping=20.0, final_logit_softcapping=10.0).to_dict())
    assert (hp["P"], hp["w"], hp["s"], hp["c"], hp["c_f"], hp["b"]) == (2, 7, 12.0, 20.0, 10.0, 10000.0)


def test_gemma3_two_ropes_from_either_config_style() -> None:
    """transformers 5's rope_parameters per layer type, and the rope_theta / rope_scaling / rope_local_base_freq
    of the configs on the Hub: the global layers' base and scaling, the local layers' base."""
    new = Gemma3TextConfig(**SIZES, sliding_window=7, rope_parameters={
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}).to_dict()
    old = {**SIZES, "model_type": "gemma3_text", "sliding_window": 7, "sliding_window_pattern": 6,
           "rope_theta": 1e6, "rope_local_base_freq": 1e4, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    for config in (new, old):
        hp = hf_hyperparameters(config)
        assert (hp["b"], hp["kappa"], hp["b_loc"], hp["P"], hp["w"]) == (1e6, 8.0, 1e4, 6, 7)


@pytest.mark.parametrize(("types", "period"), [
    (["sliding_attention", "full_attention"] * 3, 2),
    (["full_attention"] * 6, 1),
    (["sliding_attention"] * 6, 7),  # none global: l mod 7 = 0 for no l ≤ 6
])
def test_layer_types_in_every_p_th_pattern(types: list[str], period: int) -> None:
    hp = hf_hyperparameters({**Gemma3TextConfig(**SIZES, sliding_window=7).to_dict(), "layer_types": types})
    assert hp["P"] == period


def test_gemma3_tensors_tied_and_the_q_k_norms(tmp_path: Path) -> None:
    torch.manual_seed(0)
    sd = _state(Gemma3ForCausalLM(Gemma3TextConfig(**SIZES, sliding_window=7, tie_word_embeddings=True)), tmp_path)
    w = pseudoformer.load("gemma3", weights=tmp_path).weights
    np.testing.assert_array_equal(w["W_u"], sd["model.embed_tokens.weight"])
    np.testing.assert_array_equal(w["layers.4.W.gamma_q"], sd["model.layers.4.self_attn.q_norm.weight"])
    np.testing.assert_array_equal(w["layers.2.W.gamma_k"], sd["model.layers.2.self_attn.k_norm.weight"])
    np.testing.assert_array_equal(w["layers.1.gamma_3"], sd["model.layers.1.pre_feedforward_layernorm.weight"])
    np.testing.assert_array_equal(w["layers.5.gamma_4"], sd["model.layers.5.post_feedforward_layernorm.weight"])
    np.testing.assert_array_equal(w["layers.0.gamma_2"], sd["model.layers.0.post_attention_layernorm.weight"])


def test_qwen3_q_k_norms(tmp_path: Path) -> None:
    torch.manual_seed(0)
    sd = _state(Qwen3ForCausalLM(Qwen3Config(**{**SIZES, "num_hidden_layers": 2})), tmp_path)
    w = pseudoformer.load("qwen3", weights=tmp_path).weights
    np.testing.assert_array_equal(w["layers.1.W.gamma_q"], sd["model.layers.1.self_attn.q_norm.weight"])
    np.testing.assert_array_equal(w["layers.0.W.gamma_k"], sd["model.layers.0.self_attn.k_norm.weight"])


GEMMA2 = Gemma2Config(**SIZES).to_dict()
GEMMA3 = Gemma3TextConfig(**SIZES).to_dict()
QWEN3 = Qwen3Config(**SIZES).to_dict()


@pytest.mark.parametrize(("config", "change", "field"), [
    (GEMMA2, {"attn_logit_softcapping": None}, "attn_logit_softcapping = None"),
    (GEMMA2, {"final_logit_softcapping": None}, "final_logit_softcapping = None"),
    (GEMMA2, {"hidden_activation": "relu"}, "hidden_activation"),
    (GEMMA2, {"attention_bias": True}, "attention_bias"),
    (GEMMA2, {"use_bidirectional_attention": True}, "use_bidirectional_attention"),
    (GEMMA2, {"layer_types": ["full_attention", "sliding_attention"] * 3}, "not in every P-th layer"),
    (GEMMA2, {"layer_types": ["full_attention"] * 2}, "is not a list of 6"),
    (GEMMA2, {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}}, "'yarn'"),
    (GEMMA3, {"attn_logit_softcapping": 50.0}, "attn_logit_softcapping"),
    (GEMMA3, {"final_logit_softcapping": 30.0}, "final_logit_softcapping"),
    (GEMMA3, {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                  "sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}}},
     "sliding_attention layers scale"),
    (GEMMA3, {"sliding_window": None}, "sliding_window = None"),
    (QWEN3, {"attention_bias": True}, "attention_bias"),
    (QWEN3, {"use_sliding_window": True, "max_window_layers": 1}, "use_sliding_window"),
    (QWEN3, {"layer_types": ["sliding_attention"] * 6}, "layer_types"),
])
def test_settings_the_model_cannot_honour_are_named(config: dict, change: dict, field: str) -> None:
    with pytest.raises(WeightsError) as info:
        hf_hyperparameters({**config, **change})
    assert field in str(info.value)
