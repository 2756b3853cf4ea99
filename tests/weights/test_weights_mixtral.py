"""Mixtral checkpoints: config fields (the experts E and k beside Mistral's), every tensor's place (each layer's
experts.{e}.w1/w3/w2 stacked into mixtral.alg's three-index W_1, W_3, W_2), a missing or misshapen expert named,
and Mistral's refusals kept."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file
from transformers import MixtralConfig, MixtralForCausalLM

from pseudoformer.weights import WeightsError, hf_hyperparameters, load_weights, read_hf_config

D_E, H, H_KV, D, L, D_MLP, N_V, E, K = 32, 4, 2, 8, 2, 48, 101, 4, 2
SIZES = dict(vocab_size=N_V, hidden_size=D_E, intermediate_size=D_MLP, num_hidden_layers=L, num_attention_heads=H,
             num_key_value_heads=H_KV, max_position_embeddings=128, rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=1,
             num_local_experts=E, num_experts_per_tok=K, tie_word_embeddings=False)


def expected() -> dict[str, tuple[tuple[int, ...], str]]:
    """The parameters mixtral.alg declares at these sizes."""
    out = {"W_e": ((D_E, N_V), "float32"), "gamma": ((D_E,), "float32"), "W_u": ((N_V, D_E), "float32")}
    for layer in range(L):
        p = f"layers.{layer}."
        out |= {f"{p}W.heads.{h}.W_q": ((D, D_E), "float32") for h in range(H)}
        out |= {f"{p}W.g.{g}.W_{kind}": ((D, D_E), "float32") for g in range(H_KV) for kind in "kv"}
        out[p + "W.W_o"] = ((D_E, H * D), "float32")
        out[p + "gamma_1"] = out[p + "gamma_2"] = ((D_E,), "float32")
        out[p + "M.W_r"] = ((E, D_E), "float32")
        out[p + "M.W_1"] = out[p + "M.W_3"] = ((E, D_MLP, D_E), "float32")
        out[p + "M.W_2"] = ((E, D_E, D_MLP), "float32")
    return out


@pytest.fixture
def mixtral(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    torch.manual_seed(0)
    MixtralForCausalLM(MixtralConfig(**SIZES, sliding_window=6)).save_pretrained(tmp_path)
    return tmp_path, load_file(tmp_path / "model.safetensors")


def test_hyperparameters_of_a_mixtral_config(mixtral) -> None:
    directory, _ = mixtral
    hp = hf_hyperparameters(read_hf_config(directory))
    assert (hp["E"], hp["k"], hp["w"], hp["d_mlp"], hp["H_kv"]) == (E, K, 6, D_MLP, H_KV)


def test_every_tensor_in_its_place_the_experts_stacked(mixtral) -> None:
    directory, sd = mixtral
    w = load_weights(directory, expected())
    moe = "model.layers.1.block_sparse_moe."
    np.testing.assert_array_equal(w["layers.1.M.W_r"], sd[moe + "gate.weight"])
    for ours, theirs in (("W_1", "w1"), ("W_3", "w3"), ("W_2", "w2")):
        for e in range(E):
            np.testing.assert_array_equal(w[f"layers.1.M.{ours}"][e], sd[f"{moe}experts.{e}.{theirs}.weight"])
    np.testing.assert_array_equal(w["layers.0.W.g.1.W_k"], sd["model.layers.0.self_attn.k_proj.weight"][D:2 * D])
    np.testing.assert_array_equal(w["W_e"], sd["model.embed_tokens.weight"].T)


def test_a_missing_expert_is_named(mixtral) -> None:
    directory, sd = mixtral
    del sd["model.layers.0.block_sparse_moe.experts.2.w3.weight"]
    save_file(sd, directory / "model.safetensors")
    with pytest.raises(WeightsError) as info:
        load_weights(directory, expected())
    message = str(info.value)
    assert "layers.0.experts.w3.weight" in message and "e = 0, 1, 3" in message, message


def test_mistral_refusals_still_apply() -> None:
    with pytest.raises(WeightsError, match="hidden_act"):
        hf_hyperparameters({**MixtralConfig(**SIZES).to_dict(), "hidden_act": "gelu"})
