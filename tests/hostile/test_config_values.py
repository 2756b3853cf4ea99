"""Kind 6: a value passes the same checks whichever source gives it — a .toml, -D, a checkpoint's config.json.

Python's json module reads `NaN`, `Infinity` and `1e999` (which overflows to ∞) as floats; TOML and -D
refused them already. Each probe puts one such value where a checkpoint would give a number (a size, an
epsilon, a Llama 3 RoPE setting that gave NaN logits with exit 0) and expects one refusal. Values in range
must still load, and a range the source declares holds for every source alike.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hostile.conftest import GPT2, LLAMA, SMALL_GPT2, judge, run_cli

_LLAMA_CONFIG = {"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 8, "num_attention_heads": 2,
                 "num_key_value_heads": 1, "intermediate_size": 16, "vocab_size": 11, "rms_norm_eps": 1e-5,
                 "rope_theta": 10000.0, "max_position_embeddings": 64, "tie_word_embeddings": False}
_GPT2_CONFIG = {"model_type": "gpt2", "n_layer": 1, "n_embd": 8, "n_head": 2, "vocab_size": 11, "n_positions": 6,
                "layer_norm_epsilon": 1e-5}


def _checkpoint(tmp_path: Path, text: str) -> Path:
    d = tmp_path / "ckpt"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(text, encoding="utf-8")
    return d


def _with(config: dict, key: str, value: str) -> str:
    """config.json text with `key` set to the raw JSON-ish `value` (NaN, Infinity, 1e999 are not JSON)."""
    text = json.dumps({**config, key: "@@"})
    return text.replace('"@@"', value)


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN", "1e999", "-1e999"])
@pytest.mark.parametrize("key", ["layer_norm_epsilon", "n_embd", "n_layer"])
def test_nonfinite_numbers_in_a_gpt2_config_json(key: str, value: str, tmp_path: Path,
                                                 capfd: pytest.CaptureFixture[str]) -> None:
    ckpt = _checkpoint(tmp_path, _with(_GPT2_CONFIG, key, value))
    r = run_cli(["compile", GPT2, "--weights", ckpt, "-o", tmp_path / "m.onnx"], capfd)
    judge(r, "not a finite number" if "e999" in value else "is not a JSON number")
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.parametrize("where", ["rope_theta", "rope_scaling.factor", "rope_scaling.low_freq_factor",
                                   "rope_scaling.original_max_position_embeddings"])
def test_infinity_in_a_llama3_rope_setting(where: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32}
    config = {**_LLAMA_CONFIG, "rope_scaling": scaling}
    key = where.split(".")[-1]
    if "." in where:
        text = json.dumps({**config, "rope_scaling": {**scaling, key: "@@"}}).replace('"@@"', "Infinity")
    else:
        text = _with(config, key, "Infinity")
    r = run_cli(["run", LLAMA, "--weights", _checkpoint(tmp_path, text), "--input", "x=[[1, 2]]",
                 "-o", tmp_path / "y.npz"], capfd)
    judge(r, "Infinity is not a JSON number")
    assert not (tmp_path / "y.npz").exists()


@pytest.mark.parametrize("source", ["toml", "-D"])
@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_the_same_values_from_toml_and_defines(source: str, value: str, tmp_path: Path,
                                               capfd: pytest.CaptureFixture[str]) -> None:
    if source == "toml":
        toml = tmp_path / "c.toml"
        toml.write_text(f"[hyperparameters]\neps = {value}\n", encoding="utf-8")
        argv = ["check", GPT2, "--config", toml]
    else:
        argv = ["check", GPT2, *SMALL_GPT2, "-D", f"eps={value}"]
    judge(run_cli(argv, capfd), "must be a finite number")


@pytest.mark.parametrize("source", ["config.json", "-D", "toml"])
def test_a_size_of_zero_is_refused_from_every_source(source: str, tmp_path: Path,
                                                     capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.onnx"
    if source == "config.json":
        argv = ["compile", GPT2, "--weights", _checkpoint(tmp_path, json.dumps({**_GPT2_CONFIG, "n_embd": 0})),
                "-o", out]
    elif source == "-D":
        argv = ["compile", GPT2, *SMALL_GPT2, "-D", "d_e=0", "-o", out]
    else:
        toml = tmp_path / "c.toml"
        toml.write_text("[hyperparameters]\n" + "".join(f"{a.split('=')[0]} = {a.split('=')[1]}\n"
                                                         for a in SMALL_GPT2[3::2] if not a.startswith("d_e="))
                        + "d_e = 0\n", encoding="utf-8")
        argv = ["compile", GPT2, "--config", toml, "-o", out]
    r = run_cli(argv, capfd)
    assert r.code == 1 and "Traceback" not in r.err and "internal error" not in r.err, r.err
    assert not out.exists()


def test_finite_values_still_load(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    ckpt = _checkpoint(tmp_path, json.dumps({**_GPT2_CONFIG, "layer_norm_epsilon": 1e-300}))
    from pseudoformer.weights.hf_checkpoint import read_hf_config

    assert read_hf_config(ckpt)["layer_norm_epsilon"] == 1e-300
