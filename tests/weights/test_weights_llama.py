"""Llama, Mistral and Qwen2 checkpoints: config fields, every tensor's place, tying, shards, half precision,
and the settings llama.alg cannot honour, each refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, Qwen2Config, Qwen2ForCausalLM

from pseudoformer.weights import WeightsError, hf_hyperparameters, load_weights, read_hf_config

D_E, H, H_KV, D, L, D_MLP, N_V = 32, 4, 2, 8, 2, 48, 101
SIZES = dict(vocab_size=N_V, hidden_size=D_E, intermediate_size=D_MLP, num_hidden_layers=L, num_attention_heads=H,
             num_key_value_heads=H_KV, max_position_embeddings=128, rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=1)


def expected(*, bias: bool = False) -> dict[str, tuple[tuple[int, ...], str]]:
    """The parameters llama.alg (qwen2.alg with biases) declares at these sizes."""
    out = {"W_e": ((D_E, N_V), "float32"), "gamma": ((D_E,), "float32"), "W_u": ((N_V, D_E), "float32")}
    for layer in range(L):
        p = f"layers.{layer}."
        for h in range(H):
            out[f"{p}W.heads.{h}.W_q"] = ((D, D_E), "float32")
            if bias:
                out[f"{p}W.heads.{h}.b_q"] = ((D,), "float32")
        for g in range(H_KV):
            for kind in "kv":
                out[f"{p}W.g.{g}.W_{kind}"] = ((D, D_E), "float32")
                if bias:
                    out[f"{p}W.g.{g}.b_{kind}"] = ((D,), "float32")
        out[p + "W.W_o"] = ((D_E, H * D), "float32")
        out[p + "gamma_1"] = out[p + "gamma_2"] = ((D_E,), "float32")
        out[p + "W_1"] = out[p + "W_3"] = ((D_MLP, D_E), "float32")
        out[p + "W_2"] = ((D_E, D_MLP), "float32")
    return out


def _save(model: torch.nn.Module, directory: Path, **kw) -> dict[str, np.ndarray]:
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p))
    model.save_pretrained(directory, **kw)
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


@pytest.fixture
def llama(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    torch.manual_seed(0)
    return tmp_path, _save(LlamaForCausalLM(LlamaConfig(**SIZES, tie_word_embeddings=False)), tmp_path)


def test_hyperparameters_of_a_llama_config(llama) -> None:
    directory, _ = llama
    assert hf_hyperparameters(read_hf_config(directory)) == {
        "d_e": D_E, "H": H, "H_kv": H_KV, "d_attn": D, "L": L, "d_mlp": D_MLP, "N_V": N_V, "eps": 1e-5,
        "ell_max": 128, "b": 10000.0, "kappa": 1.0, "ell_0": 0.0, "alpha": 1.0, "beta": 4.0, "bos_token": 0, "eos_token": 1}


def test_every_tensor_in_its_place(llama) -> None:
    directory, sd = llama
    w = load_weights(directory, expected())
    np.testing.assert_array_equal(w["W_e"], sd["model.embed_tokens.weight"].T)
    np.testing.assert_array_equal(w["W_u"], sd["lm_head.weight"])
    np.testing.assert_array_equal(w["layers.1.W.heads.3.W_q"], sd["model.layers.1.self_attn.q_proj.weight"][3 * D:])
    np.testing.assert_array_equal(w["layers.0.W.g.1.W_k"], sd["model.layers.0.self_attn.k_proj.weight"][D:2 * D])
    np.testing.assert_array_equal(w["layers.0.W.g.0.W_v"], sd["model.layers.0.self_attn.v_proj.weight"][:D])
    np.testing.assert_array_equal(w["layers.1.W_1"], sd["model.layers.1.mlp.gate_proj.weight"])
    np.testing.assert_array_equal(w["layers.1.W_3"], sd["model.layers.1.mlp.up_proj.weight"])
    np.testing.assert_array_equal(w["layers.1.W_2"], sd["model.layers.1.mlp.down_proj.weight"])
    np.testing.assert_array_equal(w["layers.0.gamma_2"], sd["model.layers.0.post_attention_layernorm.weight"])
    np.testing.assert_array_equal(w["gamma"], sd["model.norm.weight"])


def test_tied_embeddings_unembed_with_the_embedding_table(tmp_path: Path) -> None:
    torch.manual_seed(0)
    sd = _save(LlamaForCausalLM(LlamaConfig(**SIZES, tie_word_embeddings=True)), tmp_path)
    w = load_weights(tmp_path, expected())
    np.testing.assert_array_equal(w["W_u"], sd["model.embed_tokens.weight"])
    # a save that carries a different lm_head under tie_word_embeddings is contradicting itself
    tensors = load_file(tmp_path / "model.safetensors")
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"] + 1
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(WeightsError, match="untied"):
        load_weights(tmp_path, expected())


def test_qwen2_biases_are_cut_into_heads(tmp_path: Path) -> None:
    torch.manual_seed(0)
    sd = _save(Qwen2ForCausalLM(Qwen2Config(**SIZES, tie_word_embeddings=False)), tmp_path)
    w = load_weights(tmp_path, expected(bias=True))
    np.testing.assert_array_equal(w["layers.1.W.heads.2.b_q"], sd["model.layers.1.self_attn.q_proj.bias"][2 * D:3 * D])
    np.testing.assert_array_equal(w["layers.1.W.g.1.b_v"], sd["model.layers.1.self_attn.v_proj.bias"][D:])
    # the same checkpoint under llama.alg's names: the biases have no place there
    with pytest.raises(WeightsError, match="unexpected"):
        load_weights(tmp_path, expected())


def test_sharded_and_half_precision_checkpoints_load(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SIZES, tie_word_embeddings=False))
    _save(model, tmp_path / "fp32")
    for dtype in (torch.float16, torch.bfloat16):
        d = tmp_path / str(dtype)
        half = LlamaForCausalLM(LlamaConfig(**SIZES, tie_word_embeddings=False))
        half.load_state_dict(model.state_dict())
        half.to(dtype).save_pretrained(d, max_shard_size="20KB")
        assert (d / "model.safetensors.index.json").is_file() and len(list(d.glob("*.safetensors"))) > 2
        w = load_weights(d, expected())
        assert w["W_e"].dtype == np.float32
        want = half.model.layers[1].self_attn.o_proj.weight.detach().float().numpy()
        np.testing.assert_array_equal(w["layers.1.W.W_o"], want)  # widened exactly


def test_mistral_window_and_rope_parameters() -> None:
    config = MistralConfig(**SIZES, sliding_window=7, rope_theta=5e5).to_dict()
    hp = hf_hyperparameters(config)
    assert hp["w"] == 7 and hp["b"] == 5e5
    assert hf_hyperparameters({**config, "sliding_window": None})["w"] == 128  # no window: all of ℓ_max


def test_old_style_rope_theta_and_linear_scaling() -> None:
    config = {**SIZES, "model_type": "llama", "rope_theta": 123.0, "rope_scaling": {"type": "linear", "factor": 4.0}}
    hp = hf_hyperparameters(config)
    assert (hp["b"], hp["kappa"]) == (123.0, 4.0)
    assert (hp["ell_0"], hp["alpha"], hp["beta"]) == (0.0, 1.0, 4.0), "linear is the case ℓ_0 = 0 of the bands"


def test_llama3_scaling_gives_the_bands_from_both_config_styles() -> None:
    llama3 = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}
    old = hf_hyperparameters({**SIZES, "model_type": "llama", "rope_theta": 5e5, "rope_scaling": llama3})
    new = hf_hyperparameters({**SIZES, "model_type": "llama", "rope_parameters": {**llama3, "rope_theta": 5e5}})
    for hp in (old, new):
        assert (hp["b"], hp["kappa"], hp["ell_0"], hp["alpha"], hp["beta"]) == (5e5, 32.0, 8192.0, 1.0, 4.0)


@pytest.mark.parametrize(("change", "field"), [
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling type 'yarn'"),
    ({"rope_parameters": {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}}, "rope_scaling type 'dynamic'"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0}},
     "'llama3' needs original_max_position_embeddings, high_freq_factor"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0,
                       "original_max_position_embeddings": 8192}}, "high_freq_factor = 1.0 must exceed"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": "8k"}}, "original_max_position_embeddings = '8k'"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"attention_bias": True}, "attention_bias"),
    ({"mlp_bias": True}, "mlp_bias"),
    ({"num_key_value_heads": 3}, "num_key_value_heads"),
    ({"head_dim": 7}, "head_dim = 7 is odd"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
])
def test_settings_the_model_cannot_honour_are_named(change: dict, field: str) -> None:
    with pytest.raises(WeightsError) as info:
        hf_hyperparameters({**SIZES, "model_type": "llama", **change})
    assert field in str(info.value)


def test_qwen2_sliding_layers_are_refused_and_all_refusals_come_at_once() -> None:
    config = {**Qwen2Config(**SIZES).to_dict(), "use_sliding_window": True, "max_window_layers": 1,
              "hidden_act": "relu"}
    with pytest.raises(WeightsError) as info:
        hf_hyperparameters(config)
    assert "use_sliding_window" in str(info.value) and "hidden_act" in str(info.value)


def test_config_json_on_disk_round_trips(llama) -> None:
    directory, _ = llama
    assert json.loads((directory / "config.json").read_text())["model_type"] == "llama"
