"""Our-named safetensors files, misfit reports, pickle refusal, HF config plumbing, random init."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file
from transformers import GPT2LMHeadModel
from weights_testlib import gpt2_config, gpt2_expected

import pseudoformer.weights.safetensors_io as sio
from pseudoformer.base.atomic_write import OutputError
from pseudoformer.weights import (
    WeightsError,
    hf_model_type,
    load_weights,
    random_weights,
    read_hf_config,
    save_weights,
)

SMALL = {
    "W_e": ((4, 7), "float32"),
    "layers.0.gamma_1": ((4,), "float32"),
    "layers.0.W.heads.0.b_q": ((2,), "float32"),
}


# ---- our-named files ------------------------------------------------------------------------------


def test_round_trip(tmp_path):
    w = random_weights(SMALL, seed=1)
    save_weights(w, tmp_path / "w.safetensors")
    back = load_weights(tmp_path / "w.safetensors", SMALL)
    assert back.keys() == w.keys()
    for name in w:
        np.testing.assert_array_equal(back[name], w[name])
        assert back[name].dtype == np.float32 and back[name].flags.c_contiguous and back[name].flags.owndata
    assert os.listdir(tmp_path) == ["w.safetensors"]  # no temp file left behind


def test_round_trip_of_a_full_hf_mapped_model(tmp_path, save_hf):
    directory, _ = save_hf(GPT2LMHeadModel, gpt2_config())
    w = load_weights(directory, gpt2_expected())
    save_weights(w, tmp_path / "ours.safetensors")
    back = load_weights(tmp_path / "ours.safetensors", gpt2_expected())
    assert all(np.array_equal(back[k], w[k]) for k in w)


def test_non_contiguous_and_float64_inputs(tmp_path):
    w = {
        "W_e": np.arange(28, dtype=np.float64).reshape(7, 4).T,
        "layers.0.gamma_1": np.ones(4),
        "layers.0.W.heads.0.b_q": np.zeros(2),
    }
    save_weights(w, tmp_path / "w.safetensors")
    back = load_weights(tmp_path / "w.safetensors", SMALL)
    np.testing.assert_array_equal(back["W_e"], w["W_e"].astype(np.float32))
    assert back["W_e"].dtype == np.float32


def test_save_is_atomic(tmp_path, monkeypatch):
    target = tmp_path / "w.safetensors"
    save_weights(random_weights(SMALL, 0), target)
    before = target.read_bytes()

    def boom(tensors, filename, metadata=None):  # the streaming writer, failing half-way
        with open(filename, "wb") as f:
            f.write(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(sio, "write_stream", boom)
    with pytest.raises(OutputError, match="disk full"):
        save_weights(random_weights(SMALL, 1), target)
    assert target.read_bytes() == before
    assert os.listdir(tmp_path) == ["w.safetensors"]


def test_all_problems_in_one_error_sorted(tmp_path):
    tensors = {
        "W_e": np.zeros((4, 6), np.float32),  # mis-shaped
        "layers.0.gamma_1": np.ones(4, np.float32),
        "zeta": np.zeros(3, np.float32),  # unexpected
        "alpha": np.zeros(1, np.float32),  # unexpected
        # layers.0.W.heads.0.b_q missing
    }
    save_file(tensors, tmp_path / "w.safetensors")
    with pytest.raises(WeightsError) as info:
        load_weights(tmp_path / "w.safetensors", SMALL)
    e = info.value
    assert (
        e.summary
        == f"weights '{tmp_path / 'w.safetensors'}' do not fit the model: 1 missing, 2 unexpected, 1 mis-shaped"
    )
    assert e.problems == [
        "W_e: mis-shaped, expected (4, 7), got (4, 6)",
        "alpha: unexpected, shape (1,)",
        "layers.0.W.heads.0.b_q: missing, expected shape (2,)",
        "zeta: unexpected, shape (3,)",
    ]
    assert str(e).splitlines() == [e.summary, *("  " + p for p in e.problems)]


def test_integer_tensor_is_not_cast(tmp_path):
    w = random_weights(SMALL, 0)
    w["W_e"] = np.ones((4, 7), np.int32)
    save_file(w, tmp_path / "w.safetensors")
    with pytest.raises(WeightsError, match="W_e: invalid, dtype int32 is not floating-point"):
        load_weights(tmp_path / "w.safetensors", SMALL)


def test_hf_file_given_instead_of_directory_gets_a_hint(save_hf):
    directory, _ = save_hf(GPT2LMHeadModel, gpt2_config())
    with pytest.raises(WeightsError, match="pass the directory"):
        load_weights(directory / "model.safetensors", gpt2_expected())


def test_weights_error_pickles():
    e = WeightsError("summary line", ["a: missing", "b: unexpected"])
    back = pickle.loads(pickle.dumps(e))
    assert back.problems == e.problems and str(back) == str(e)


# ---- refusing pickles ---------------------------------------------------------------------------


class _Payload:
    """Unpickling this creates the marker file: proof that something unpickled the checkpoint."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture
def no_unpickling(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("a pickle was opened")

    monkeypatch.setattr(torch, "load", fail)
    monkeypatch.setattr(pickle, "load", fail)
    monkeypatch.setattr(pickle, "loads", fail)


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt", "model.pth", "model.ckpt"])
def test_pickle_file_refused_unopened(tmp_path, name, no_unpickling):
    marker = tmp_path / "pwned"
    path = tmp_path / name
    path.write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(WeightsError, match="only safetensors is read") as info:
        load_weights(path, SMALL)
    assert "convert with" in str(info.value) and "safetensors" in str(info.value)
    assert not marker.exists()


def test_pickle_only_hf_directory_refused_unopened(tmp_path, save_hf, no_unpickling):
    directory, _ = save_hf(GPT2LMHeadModel, gpt2_config())
    (directory / "model.safetensors").unlink()
    marker = tmp_path / "pwned"
    (directory / "pytorch_model.bin").write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(WeightsError, match="only safetensors is read.*save_pretrained"):
        load_weights(directory, gpt2_expected())
    assert not marker.exists()


def test_safetensors_preferred_when_both_present(tmp_path, save_hf, no_unpickling):
    directory, _ = save_hf(GPT2LMHeadModel, gpt2_config())
    marker = tmp_path / "pwned"
    (directory / "pytorch_model.bin").write_bytes(pickle.dumps(_Payload(marker)))
    assert load_weights(directory, gpt2_expected()).keys() == gpt2_expected().keys()
    assert not marker.exists()


def test_shard_index_cannot_point_outside_the_directory(save_hf, tmp_path):
    directory, _ = save_hf(GPT2LMHeadModel, gpt2_config(), max_shard_size="20KB")
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = "../elsewhere.safetensors"
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(WeightsError, match="not a .safetensors file in the directory"):
        load_weights(directory, gpt2_expected())


def test_shard_index_listing_absent_tensor(save_hf):
    directory, _ = save_hf(GPT2LMHeadModel, gpt2_config(), max_shard_size="20KB")
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    index["weight_map"]["transformer.ghost"] = next(iter(index["weight_map"].values()))
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(WeightsError, match="transformer.ghost: listed in the index"):
        load_weights(directory, gpt2_expected())


# ---- paths and configs ----------------------------------------------------------------------------


def test_bad_paths(tmp_path):
    with pytest.raises(WeightsError, match="no such file"):
        load_weights(tmp_path / "nope.safetensors", SMALL)
    (tmp_path / "w.npz").write_bytes(b"")
    with pytest.raises(WeightsError, match="expected a .safetensors or .gguf file"):
        load_weights(tmp_path / "w.npz", SMALL)
    (tmp_path / "empty").mkdir()
    with pytest.raises(WeightsError, match="no config.json"):
        load_weights(tmp_path / "empty", SMALL)
    (tmp_path / "corrupt.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(WeightsError, match="cannot read safetensors"):
        load_weights(tmp_path / "corrupt.safetensors", SMALL)


def test_model_type(save_hf, tmp_path):
    directory, _ = save_hf(GPT2LMHeadModel, gpt2_config())
    assert hf_model_type(directory) == "gpt2"
    assert read_hf_config(directory)["n_embd"] == 32
    (tmp_path / "t5").mkdir()
    (tmp_path / "t5" / "config.json").write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(WeightsError, match="'t5' is not supported; supported types: bart, bert, gemma2, gemma3_text, "
                       "gpt2, gpt_neox, llama, mistral, mixtral, phi3, qwen2, qwen3"):
        hf_model_type(tmp_path / "t5")
    with pytest.raises(WeightsError, match="'t5' is not supported"):
        load_weights(tmp_path / "t5", SMALL)


def test_directory_without_weights(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(WeightsError, match="holds neither model.safetensors"):
        load_weights(tmp_path, SMALL)


# ---- random weights ---------------------------------------------------------------------------------


def test_random_weights_deterministic_and_order_independent():
    a = random_weights(gpt2_expected(), seed=7)
    b = random_weights(dict(reversed(list(gpt2_expected().items()))), seed=7)
    c = random_weights(gpt2_expected(), seed=8)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["W_e"], c["W_e"])
    for name, (shape, _) in gpt2_expected().items():
        assert a[name].shape == shape and a[name].dtype == np.float32 and a[name].flags.c_contiguous


def test_random_weights_scales():
    w = random_weights(gpt2_expected(), seed=0)
    gains = np.concatenate([w["gamma"], w["layers.0.gamma_1"]])
    assert abs(gains.mean() - 1) < 0.01 and gains.std() > 0.005  # near one, but not exactly
    biases = np.concatenate([w["beta"], w["layers.1.b_mlp1"], w["layers.0.W.heads.2.b_v"]])
    assert np.all(biases != 0) and abs(biases.std() - 0.02) < 0.01
    assert abs(w["W_e"].std() - 0.02) < 0.002


def test_load_without_path_is_random():
    a = load_weights(None, SMALL, seed=3)
    assert all(np.array_equal(a[k], v) for k, v in random_weights(SMALL, 3).items())
    assert all(np.array_equal(load_weights(None, SMALL)[k], v) for k, v in random_weights(SMALL).items())


def test_seed_with_path_is_refused(tmp_path):
    save_weights(random_weights(SMALL), tmp_path / "w.safetensors")
    with pytest.raises(ValueError, match="seed only applies"):
        load_weights(tmp_path / "w.safetensors", SMALL, seed=1)


def test_malformed_expected_is_a_type_error():
    with pytest.raises(TypeError, match="W_e"):
        load_weights(None, {"W_e": ((4, 7), "int64")})
    with pytest.raises(TypeError, match="W_e"):
        load_weights(None, {"W_e": (4, "float32")})
