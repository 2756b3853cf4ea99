"""BERT checkpoints: hyperparameters, prefixes, the optional MLM head, and agreement with HF."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file
from transformers import BertForMaskedLM, BertForPreTraining, BertModel
from weights_testlib import (
    D_E,
    D_MLP,
    ELL_MAX,
    HEADS,
    LAYERS,
    N_V,
    bert_config,
    bert_expected,
    bert_hidden,
    bert_mlm_logits,
    sd,
)

from pseudoformer.weights import WeightsError, hf_hyperparameters, load_weights, read_hf_config

DH = D_E // HEADS
IDS = [2, 17, 99, 0, 42, 42, 7, 64]


def test_hyperparameters_from_saved_config(save_hf):
    directory, _ = save_hf(BertForMaskedLM, bert_config())
    assert hf_hyperparameters(read_hf_config(directory)) == {
        "d_e": D_E,
        "H": HEADS,
        "L": LAYERS,
        "ell_max": ELL_MAX,
        "N_V": N_V,
        "d_mlp": D_MLP,
        "eps": 1e-12,
        "d_attn": DH,
        "d_mid": DH,
        "d_f": D_E,
    }


def test_unsupported_settings_are_all_named_at_once():
    with pytest.raises(WeightsError) as info:
        hf_hyperparameters(
            {"model_type": "bert", "hidden_act": "gelu_new", "position_embedding_type": "relative_key"}
        )
    assert len(info.value.problems) == 2
    assert "hidden_act" in str(info.value) and "position_embedding_type" in str(info.value)


def test_mlm_checkpoint_every_tensor(save_hf):
    directory, model = save_hf(BertForMaskedLM, bert_config())
    hf = sd(model)
    w = load_weights(directory, bert_expected())
    assert w.keys() == bert_expected().keys()
    np.testing.assert_array_equal(w["W_e"], hf["bert.embeddings.word_embeddings.weight"].T)
    np.testing.assert_array_equal(w["W_p"], hf["bert.embeddings.position_embeddings.weight"].T)
    np.testing.assert_array_equal(w["w_s"], hf["bert.embeddings.token_type_embeddings.weight"][0])
    np.testing.assert_array_equal(w["gamma_e"], hf["bert.embeddings.LayerNorm.weight"])
    np.testing.assert_array_equal(w["beta_e"], hf["bert.embeddings.LayerNorm.bias"])
    for layer in range(LAYERS):
        p, q = f"layers.{layer}.", f"bert.encoder.layer.{layer}."
        for h in range(HEADS):
            rows = slice(h * DH, (h + 1) * DH)
            for part, hf_name in zip("qkv", ("query", "key", "value"), strict=True):
                np.testing.assert_array_equal(
                    w[f"{p}W.heads.{h}.W_{part}"], hf[f"{q}attention.self.{hf_name}.weight"][rows]
                )
                np.testing.assert_array_equal(
                    w[f"{p}W.heads.{h}.b_{part}"], hf[f"{q}attention.self.{hf_name}.bias"][rows]
                )
        np.testing.assert_array_equal(w[p + "W.W_o"], hf[q + "attention.output.dense.weight"])
        np.testing.assert_array_equal(w[p + "W.b_o"], hf[q + "attention.output.dense.bias"])
        np.testing.assert_array_equal(w[p + "gamma_1"], hf[q + "attention.output.LayerNorm.weight"])
        np.testing.assert_array_equal(w[p + "beta_1"], hf[q + "attention.output.LayerNorm.bias"])
        np.testing.assert_array_equal(w[p + "W_mlp1"], hf[q + "intermediate.dense.weight"])
        np.testing.assert_array_equal(w[p + "b_mlp1"], hf[q + "intermediate.dense.bias"])
        np.testing.assert_array_equal(w[p + "W_mlp2"], hf[q + "output.dense.weight"])
        np.testing.assert_array_equal(w[p + "b_mlp2"], hf[q + "output.dense.bias"])
        np.testing.assert_array_equal(w[p + "gamma_2"], hf[q + "output.LayerNorm.weight"])
        np.testing.assert_array_equal(w[p + "beta_2"], hf[q + "output.LayerNorm.bias"])
    np.testing.assert_array_equal(w["W_f"], hf["cls.predictions.transform.dense.weight"])
    np.testing.assert_array_equal(w["b_f"], hf["cls.predictions.transform.dense.bias"])
    np.testing.assert_array_equal(w["gamma"], hf["cls.predictions.transform.LayerNorm.weight"])
    np.testing.assert_array_equal(w["beta"], hf["cls.predictions.transform.LayerNorm.bias"])
    np.testing.assert_array_equal(w["b_u"], hf["cls.predictions.bias"])


def test_paper_forward_on_mapped_weights_matches_hf(save_hf):
    directory, model = save_hf(BertForMaskedLM, bert_config())
    with torch.no_grad():
        ref = model(torch.tensor([IDS])).logits[0].numpy().T
    ours = bert_mlm_logits(load_weights(directory, bert_expected()), IDS, HEADS, LAYERS)
    np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=1e-4)


def test_mlm_checkpoint_serves_encoder_only_entry(save_hf):
    directory, model = save_hf(BertForMaskedLM, bert_config())
    w = load_weights(directory, bert_expected(mlm=False))
    assert w.keys() == bert_expected(mlm=False).keys()
    with torch.no_grad():
        ref = model.bert(torch.tensor([IDS])).last_hidden_state[0].numpy().T
    np.testing.assert_allclose(bert_hidden(w, IDS, HEADS, LAYERS), ref, atol=1e-4, rtol=1e-4)


def test_base_model_save_without_prefix_and_pooler_ignored(save_hf):
    directory, model = save_hf(BertModel, bert_config())
    stored = load_file(directory / "model.safetensors")
    assert "pooler.dense.weight" in stored and not any(k.startswith("bert.") for k in stored)
    w = load_weights(directory, bert_expected(mlm=False))
    np.testing.assert_array_equal(w["W_e"], sd(model)["embeddings.word_embeddings.weight"].T)


def test_base_model_save_lacks_the_mlm_head(save_hf):
    directory, _ = save_hf(BertModel, bert_config())
    with pytest.raises(WeightsError) as info:
        load_weights(directory, bert_expected(mlm=True))
    assert info.value.summary.endswith("do not fit the model: 5 missing")
    assert [p.split(":")[0] for p in info.value.problems] == ["W_f", "b_f", "b_u", "beta", "gamma"]


def test_pretraining_checkpoint_nsp_head_ignored(save_hf):
    directory, model = save_hf(BertForPreTraining, bert_config())
    assert "cls.seq_relationship.weight" in load_file(directory / "model.safetensors")
    w = load_weights(directory, bert_expected())
    np.testing.assert_array_equal(w["b_u"], sd(model)["cls.predictions.bias"])


def _rewrite(directory, edit):
    tensors = load_file(directory / "model.safetensors")
    edit(tensors)
    save_file(tensors, directory / "model.safetensors")


def test_explicit_tied_decoder_and_legacy_names_accepted(save_hf):
    directory, model = save_hf(BertForMaskedLM, bert_config())
    hf = sd(model)

    def legacy(t):
        # The spellings of older / TF-converted checkpoints such as bert-base-uncased.
        t["cls.predictions.decoder.weight"] = t["bert.embeddings.word_embeddings.weight"].copy()
        t["cls.predictions.decoder.bias"] = t.pop("cls.predictions.bias")
        t["bert.embeddings.position_ids"] = np.arange(ELL_MAX, dtype=np.int64)[None]
        for k in [k for k in t if ".LayerNorm." in k]:
            t[
                k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
            ] = t.pop(k)

    _rewrite(directory, legacy)
    w = load_weights(directory, bert_expected())
    np.testing.assert_array_equal(w["b_u"], hf["cls.predictions.bias"])
    np.testing.assert_array_equal(w["gamma_e"], hf["bert.embeddings.LayerNorm.weight"])
    np.testing.assert_array_equal(w["layers.1.beta_2"], hf["bert.encoder.layer.1.output.LayerNorm.bias"])


def test_untied_decoder_refused_only_when_the_head_is_used(save_hf):
    directory, _ = save_hf(BertForMaskedLM, bert_config())

    def untie(t):
        t["cls.predictions.decoder.weight"] = t["bert.embeddings.word_embeddings.weight"] + 1

    _rewrite(directory, untie)
    with pytest.raises(WeightsError) as info:
        load_weights(directory, bert_expected())
    assert len(info.value.problems) == 1 and info.value.problems[0].startswith(
        "cls.predictions.decoder.weight: untied"
    )
    load_weights(directory, bert_expected(mlm=False))


def test_conflicting_bias_copies_refused(save_hf):
    directory, _ = save_hf(BertForMaskedLM, bert_config())
    _rewrite(
        directory, lambda t: t.__setitem__("cls.predictions.decoder.bias", t["cls.predictions.bias"] + 1)
    )
    with pytest.raises(WeightsError, match="cls.predictions.decoder.bias: untied"):
        load_weights(directory, bert_expected())


def test_classifier_head_is_unknown(save_hf):
    directory, _ = save_hf(BertModel, bert_config())
    _rewrite(directory, lambda t: t.__setitem__("classifier.weight", np.zeros((2, D_E), np.float32)))
    with pytest.raises(WeightsError, match="classifier.weight: unknown"):
        load_weights(directory, bert_expected(mlm=False))
