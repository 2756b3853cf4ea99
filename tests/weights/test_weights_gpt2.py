"""GPT-2 checkpoints: hyperparameters, name mapping, and agreement with HF's own forward pass."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.numpy import load_file, save_file
from transformers import GPT2LMHeadModel, GPT2Model
from weights_testlib import D_E, ELL_MAX, HEADS, LAYERS, N_V, gpt2_config, gpt2_expected, gpt2_logits, sd

from pseudoformer.weights import WeightsError, hf_hyperparameters, load_weights, read_hf_config

DH = D_E // HEADS


def test_hyperparameters_from_saved_config(save_hf):
    directory, _ = save_hf(GPT2LMHeadModel, gpt2_config())
    hp = hf_hyperparameters(read_hf_config(directory))
    assert hp == {
        "d_e": D_E,
        "H": HEADS,
        "L": LAYERS,
        "ell_max": ELL_MAX,
        "N_V": N_V,
        "d_mlp": 4 * D_E,
        "eps": 1e-5,
        "d_attn": DH,
        "d_mid": DH,
    }


def test_hyperparameters_n_inner_and_defaults():
    assert hf_hyperparameters({"model_type": "gpt2", "n_embd": 32, "n_head": 4, "n_inner": 48})["d_mlp"] == 48
    # Absent keys take GPT2Config's defaults, as transformers itself would.
    hp = hf_hyperparameters({"model_type": "gpt2"})
    assert (hp["d_e"], hp["H"], hp["L"], hp["ell_max"], hp["N_V"], hp["d_mlp"]) == (
        768,
        12,
        12,
        1024,
        50257,
        3072,
    )


def test_pytorch_tanh_gelu_is_the_same_function():
    assert (
        hf_hyperparameters({"model_type": "gpt2", "activation_function": "gelu_pytorch_tanh"})["d_e"] == 768
    )


def test_unsupported_settings_are_all_named_at_once():
    bad = {
        "model_type": "gpt2",
        "activation_function": "relu",
        "scale_attn_by_inverse_layer_idx": True,
        "add_cross_attention": True,
    }
    with pytest.raises(WeightsError) as info:
        hf_hyperparameters(bad)
    text = str(info.value)
    assert len(info.value.problems) == 3
    for setting in ("activation_function", "scale_attn_by_inverse_layer_idx", "add_cross_attention"):
        assert setting in text


def test_unsupported_config_refused_by_load_weights(save_hf):
    directory, _ = save_hf(GPT2LMHeadModel, gpt2_config(activation_function="relu"))
    with pytest.raises(WeightsError, match="activation_function"):
        load_weights(directory, gpt2_expected())


def test_every_tensor_mapped(save_hf):
    directory, model = save_hf(GPT2LMHeadModel, gpt2_config())
    hf = sd(model)
    w = load_weights(directory, gpt2_expected())
    assert w.keys() == gpt2_expected().keys()
    for name, (shape, _) in gpt2_expected().items():
        assert w[name].shape == shape and w[name].dtype == np.float32 and w[name].flags.c_contiguous, name

    np.testing.assert_array_equal(w["W_e"], hf["transformer.wte.weight"].T)
    np.testing.assert_array_equal(w["W_p"], hf["transformer.wpe.weight"].T)
    np.testing.assert_array_equal(w["gamma"], hf["transformer.ln_f.weight"])
    np.testing.assert_array_equal(w["beta"], hf["transformer.ln_f.bias"])
    for layer in range(LAYERS):
        p, q = f"layers.{layer}.", f"transformer.h.{layer}."
        c_attn_w, c_attn_b = hf[q + "attn.c_attn.weight"], hf[q + "attn.c_attn.bias"]
        for h in range(HEADS):
            for i, part in enumerate("qkv"):
                cols = slice(i * D_E + h * DH, i * D_E + (h + 1) * DH)
                np.testing.assert_array_equal(w[f"{p}W.heads.{h}.W_{part}"], c_attn_w[:, cols].T)
                np.testing.assert_array_equal(w[f"{p}W.heads.{h}.b_{part}"], c_attn_b[cols])
        np.testing.assert_array_equal(w[p + "W.W_o"], hf[q + "attn.c_proj.weight"].T)
        np.testing.assert_array_equal(w[p + "W.b_o"], hf[q + "attn.c_proj.bias"])
        np.testing.assert_array_equal(w[p + "W_mlp1"], hf[q + "mlp.c_fc.weight"].T)
        np.testing.assert_array_equal(w[p + "b_mlp1"], hf[q + "mlp.c_fc.bias"])
        np.testing.assert_array_equal(w[p + "W_mlp2"], hf[q + "mlp.c_proj.weight"].T)
        np.testing.assert_array_equal(w[p + "b_mlp2"], hf[q + "mlp.c_proj.bias"])
        for i in "12":
            np.testing.assert_array_equal(w[f"{p}gamma_{i}"], hf[f"{q}ln_{i}.weight"])
            np.testing.assert_array_equal(w[f"{p}beta_{i}"], hf[f"{q}ln_{i}.bias"])


def test_spot_check_head_1_layer_1(save_hf):
    directory, model = save_hf(GPT2LMHeadModel, gpt2_config())
    c_attn = sd(model)["transformer.h.1.attn.c_attn.weight"]
    w = load_weights(directory, gpt2_expected())
    np.testing.assert_array_equal(w["layers.1.W.heads.1.W_q"], c_attn[:, 8:16].T)
    np.testing.assert_array_equal(w["layers.1.W.heads.1.W_k"], c_attn[:, 40:48].T)
    np.testing.assert_array_equal(w["layers.1.W.heads.1.W_v"], c_attn[:, 72:80].T)


def test_paper_forward_on_mapped_weights_matches_hf(save_hf):
    directory, model = save_hf(GPT2LMHeadModel, gpt2_config())
    ids = [5, 17, 99, 0, 42, 42, 7]
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].numpy().T
    ours = gpt2_logits(load_weights(directory, gpt2_expected()), ids, HEADS, LAYERS)
    np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=1e-4)


def test_base_model_save_without_prefix(save_hf):
    directory, model = save_hf(GPT2Model, gpt2_config())
    assert not any(k.startswith("transformer.") for k in load_file(directory / "model.safetensors"))
    w = load_weights(directory, gpt2_expected())
    np.testing.assert_array_equal(w["W_e"], sd(model)["wte.weight"].T)


def test_sharded_checkpoint(save_hf):
    single, _ = save_hf(GPT2LMHeadModel, gpt2_config(), name="single", seed=3)
    sharded, _ = save_hf(GPT2LMHeadModel, gpt2_config(), name="sharded", seed=3, max_shard_size="20KB")
    assert (
        not (sharded / "model.safetensors").exists() and (sharded / "model.safetensors.index.json").exists()
    )
    a, b = load_weights(single, gpt2_expected()), load_weights(sharded, gpt2_expected())
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


def test_bfloat16_checkpoint_widened_exactly(save_hf):
    directory, model = save_hf(GPT2LMHeadModel, gpt2_config())
    model.to(torch.bfloat16).save_pretrained(directory)
    with safe_open(directory / "model.safetensors", framework="numpy") as f:
        assert f.get_slice("transformer.wte.weight").get_dtype() == "BF16"
    w = load_weights(directory, gpt2_expected())
    assert w["W_e"].dtype == np.float32
    np.testing.assert_array_equal(w["W_e"], model.transformer.wte.weight.detach().float().numpy().T)


def test_legacy_buffers_and_tied_lm_head_ignored(save_hf, tmp_path):
    directory, _ = save_hf(GPT2LMHeadModel, gpt2_config())
    tensors = load_file(directory / "model.safetensors")
    # What pre-4.x saves (e.g. the original gpt2 checkpoint) carry besides parameters.
    tensors["transformer.h.0.attn.bias"] = np.tril(np.ones((1, 1, 8, 8), np.float32))
    tensors["transformer.h.1.attn.masked_bias"] = np.array(-1e4, np.float32)
    tensors["lm_head.weight"] = tensors["transformer.wte.weight"].copy()
    save_file(tensors, directory / "model.safetensors")
    assert load_weights(directory, gpt2_expected()).keys() == gpt2_expected().keys()


def test_untied_lm_head_refused(save_hf):
    directory, _ = save_hf(GPT2LMHeadModel, gpt2_config(tie_word_embeddings=False))
    with pytest.raises(WeightsError) as info:
        load_weights(directory, gpt2_expected())
    problems = info.value.problems
    assert len(problems) == 1 and problems[0].startswith("lm_head.weight: untied")


def test_unknown_hf_tensor_is_an_error(save_hf):
    directory, _ = save_hf(GPT2LMHeadModel, gpt2_config())
    tensors = load_file(directory / "model.safetensors")
    tensors["transformer.h.0.attn.rotary.inv_freq"] = np.ones(4, np.float32)
    save_file(tensors, directory / "model.safetensors")
    with pytest.raises(WeightsError, match=r"1 unknown") as info:
        load_weights(directory, gpt2_expected())
    assert info.value.problems[0].startswith("transformer.h.0.attn.rotary.inv_freq: unknown")


def test_more_layers_than_the_model_are_reported(save_hf):
    directory, _ = save_hf(GPT2LMHeadModel, gpt2_config(n_layer=3))
    with pytest.raises(WeightsError) as info:
        load_weights(directory, gpt2_expected(layers=2))
    problems = info.value.problems
    per_layer = len(gpt2_expected(layers=1)) - len(gpt2_expected(layers=0))
    assert len(problems) == per_layer
    assert all(p.startswith("layers.2.") and ": unexpected" in p for p in problems)
    assert "(from transformer.h.2." in problems[0]


def test_width_mismatch_names_source_tensor(save_hf):
    directory, _ = save_hf(GPT2LMHeadModel, gpt2_config(n_embd=48))
    with pytest.raises(WeightsError) as info:
        load_weights(directory, gpt2_expected())
    w_e = next(p for p in info.value.problems if p.startswith("W_e:"))
    assert w_e == "W_e: mis-shaped, expected (32, 101), got (48, 101) (from transformer.wte.weight)"
    assert "mis-shaped" in info.value.summary and "missing" not in info.value.summary


def test_fused_qkv_that_does_not_split_is_invalid(save_hf):
    directory, _ = save_hf(GPT2LMHeadModel, gpt2_config())
    tensors = load_file(directory / "model.safetensors")
    tensors["transformer.h.0.attn.c_attn.bias"] = np.zeros(95, np.float32)
    save_file(tensors, directory / "model.safetensors")
    with pytest.raises(WeightsError) as info:
        load_weights(directory, gpt2_expected())
    assert any(p.startswith("transformer.h.0.attn.c_attn.bias: invalid") for p in info.value.problems)
    assert "layers.0.W.heads.0.b_q: missing, expected shape (8,)" in info.value.problems
