"""GPT-NeoX and Phi-3 checkpoints: config fields, and every tensor's place: NeoX's head-major query_key_value
(rows [H, 3, d]) and Phi-3's packed qkv_proj (rows [H·d; H_kv·d; H_kv·d]) and gate_up_proj (gate, then up)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, Phi3Config, Phi3ForCausalLM

import pseudoformer
from pseudoformer.weights import hf_hyperparameters, read_hf_config

D_E, H, D, L, D_MLP, N_V = 32, 4, 8, 2, 48, 101
SIZES = dict(vocab_size=N_V, hidden_size=D_E, intermediate_size=D_MLP, num_hidden_layers=L, num_attention_heads=H,
             max_position_embeddings=128, bos_token_id=0, eos_token_id=1)


def _save(model: torch.nn.Module, directory: Path) -> dict[str, np.ndarray]:
    model.save_pretrained(directory)
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def test_neox_hyperparameters_and_every_tensor_in_its_place(tmp_path: Path) -> None:
    torch.manual_seed(0)
    sd = _save(GPTNeoXForCausalLM(GPTNeoXConfig(**SIZES, rotary_pct=0.5, rotary_emb_base=300.0)), tmp_path)
    assert hf_hyperparameters(read_hf_config(tmp_path)) == {
        "d_e": D_E, "H": H, "L": L, "d_mlp": D_MLP, "N_V": N_V, "eps": 1e-5, "ell_max": 128, "b": 300.0, "kappa": 1.0,
        "ell_0": 0.0, "alpha": 1.0, "beta": 4.0, "r": 4, "d_attn": D, "bos_token": 0, "eos_token": 1}
    w = pseudoformer.load("gpt_neox", weights=tmp_path).weights
    qkv = sd["gpt_neox.layers.1.attention.query_key_value.weight"].reshape(H, 3, D, D_E)
    qkv_b = sd["gpt_neox.layers.1.attention.query_key_value.bias"].reshape(H, 3, D)
    for h in range(H):
        for i, kind in enumerate("qkv"):
            np.testing.assert_array_equal(w[f"layers.1.W.heads.{h}.W_{kind}"], qkv[h, i])
            np.testing.assert_array_equal(w[f"layers.1.W.heads.{h}.b_{kind}"], qkv_b[h, i])
    np.testing.assert_array_equal(w["W_e"], sd["gpt_neox.embed_in.weight"].T)
    np.testing.assert_array_equal(w["W_u"], sd["lm_head.weight"])  # saved as embed_out.weight, as Pythia's are
    np.testing.assert_array_equal(w["layers.0.W.W_o"], sd["gpt_neox.layers.0.attention.dense.weight"])
    np.testing.assert_array_equal(w["layers.0.W.b_o"], sd["gpt_neox.layers.0.attention.dense.bias"])
    np.testing.assert_array_equal(w["layers.0.W_mlp1"], sd["gpt_neox.layers.0.mlp.dense_h_to_4h.weight"])
    np.testing.assert_array_equal(w["layers.0.b_mlp2"], sd["gpt_neox.layers.0.mlp.dense_4h_to_h.bias"])
    np.testing.assert_array_equal(w["layers.1.beta_2"], sd["gpt_neox.layers.1.post_attention_layernorm.bias"])
    np.testing.assert_array_equal(w["gamma"], sd["gpt_neox.final_layer_norm.weight"])


def test_phi3_hyperparameters_and_packed_tensors_in_their_places(tmp_path: Path) -> None:
    torch.manual_seed(0)
    h_kv = 2
    sd = _save(Phi3ForCausalLM(Phi3Config(**SIZES, num_key_value_heads=h_kv, sliding_window=7, pad_token_id=0)),
               tmp_path)
    hp = hf_hyperparameters(read_hf_config(tmp_path))
    assert (hp["H"], hp["H_kv"], hp["d_attn"], hp["w"], hp["eps"]) == (H, h_kv, D, 7, 1e-5)
    w = pseudoformer.load("phi3", weights=tmp_path).weights
    qkv = sd["model.layers.1.self_attn.qkv_proj.weight"]
    np.testing.assert_array_equal(w["layers.1.W.heads.3.W_q"], qkv[3 * D:4 * D])
    np.testing.assert_array_equal(w["layers.1.W.g.0.W_k"], qkv[H * D:(H + 1) * D])
    np.testing.assert_array_equal(w["layers.1.W.g.1.W_v"], qkv[(H + 3) * D:])
    gate_up = sd["model.layers.0.mlp.gate_up_proj.weight"]
    np.testing.assert_array_equal(w["layers.0.W_1"], gate_up[:D_MLP])
    np.testing.assert_array_equal(w["layers.0.W_3"], gate_up[D_MLP:])
    np.testing.assert_array_equal(w["layers.0.W_2"], sd["model.layers.0.mlp.down_proj.weight"])
    np.testing.assert_array_equal(w["W_u"], sd["lm_head.weight"])
