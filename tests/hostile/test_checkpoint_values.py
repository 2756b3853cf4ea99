"""Kind: the values a checkpoint's config gives are typed and bounded where they enter, and named by their source.

config.json's fields and a GGUF file's metadata are read through weights/config_values.py: a size is an integer
of at most 2^31 − 1 (a max_position_embeddings of 2^63 was taken), a real is a finite float32 number (a rope base of
1e308 was taken), a flag is true or false (the string "false" read as true), an object is an object (a
rope_parameters list was ignored). A GGUF file's messages name the file and its metadata key, not a config.json
the user never gave."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from pseudoformer.weights.errors import WeightsError
from pseudoformer.weights.hf_checkpoint import hf_hyperparameters
from tests.hostile.conftest import LLAMA, judge, run_cli
from tests.hostile.test_gguf_input import _after, base  # noqa: F401 (the fixture)

BASE = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128, vocab_size=100,
            num_key_value_heads=2, head_dim=16)
FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "phi3", "gpt_neox", "mixtral", "gemma2", "gemma3_text"]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("key, value, why", [
    ("max_position_embeddings", 2**63, "is past 2,147,483,647"),
    ("max_position_embeddings", "4096", "is not an integer"),
    ("max_position_embeddings", True, "is not an integer"),
    ("num_hidden_layers", 0, "is not positive"),
    ("rope_theta", 1e308, "is not a finite float32 number"),
    ("rope_theta", "10000", "is not a number"),
])
def test_a_config_value_out_of_type_or_range_is_refused_by_name(family: str, key: str, value: object, why: str) -> None:
    with pytest.raises(WeightsError) as e:
        hf_hyperparameters({**BASE, "model_type": family, key: value})
    assert f"config.json: {key} = {value!r} {why}" in str(e.value)


@pytest.mark.parametrize("config, refusal", [
    ({"model_type": "gpt_neox", "use_parallel_residual": "false"}, "use_parallel_residual = 'false': not true or false"),
    ({"model_type": "llama", "rope_parameters": [1, 2]}, "rope_parameters = [1, 2] is not an object"),
    ({"model_type": "gpt_neox", "rotary_pct": 0}, "rotary_pct = 0"),
    ({"model_type": "gpt_neox", "rotary_pct": 1.5}, "rotary_pct = 1.5"),
    ({"model_type": "gpt_neox", "rotary_pct": 1e-9}, "rotary_pct = 1e-09"),
    ({"model_type": "phi3", "partial_rotary_factor": 0.5}, "partial_rotary_factor = 0.5"),
])
def test_a_setting_the_model_would_misread_or_ignore_is_refused_by_name(config: dict, refusal: str) -> None:
    with pytest.raises(WeightsError) as e:
        hf_hyperparameters({**BASE, **config})
    assert refusal in str(e.value)


def _run(tmp_path: Path, data: bytes, capfd: pytest.CaptureFixture[str]):  # noqa: ANN202
    path = tmp_path / "m.gguf"
    path.write_bytes(data)
    return run_cli(["run", LLAMA, "--weights", path, "--input", "x=[[1, 2]]", "-o", tmp_path / "y.npz"], capfd)


@pytest.mark.parametrize("key, packed, shown", [
    (b"llama.context_length", struct.pack("<I", 2**32 - 1), "llama.context_length = 4294967295 is past"),
    (b"llama.rope.freq_base", struct.pack("<f", float("inf")), "llama.rope.freq_base = inf is not a finite"),
    (b"llama.rope.freq_base", struct.pack("<f", float("nan")), "llama.rope.freq_base = nan is not a finite"),
])
def test_gguf_metadata_is_bounded_as_config_json_is_and_named_in_its_file(
        key: bytes, packed: bytes, shown: str, tmp_path: Path, base: bytes,  # noqa: F811
        capfd: pytest.CaptureFixture[str]) -> None:
    data = bytearray(base)
    at = _after(base, key) + 4  # past the value's type
    data[at:at + 4] = packed
    r = _run(tmp_path, bytes(data), capfd)
    judge(r, shown)
    assert str(tmp_path / "m.gguf") in r.err and "config.json" not in r.err


def test_a_gguf_refusal_of_the_family_names_the_file_and_key(tmp_path: Path, base: bytes,  # noqa: F811
                                                             capfd: pytest.CaptureFixture[str]) -> None:
    data = bytearray(base)
    at = _after(base, b"llama.attention.layer_norm_rms_epsilon") + 4
    data[at:at + 4] = struct.pack("<f", -1.0)
    r = _run(tmp_path, bytes(data), capfd)
    judge(r, "metadata llama.attention.layer_norm_rms_epsilon = -1.0 is not positive")
    assert "config.json" not in r.err


@pytest.mark.parametrize("command", ["run", "compile"])
@pytest.mark.parametrize("scale", [0x7C00, 0x7E00], ids=["inf", "nan"])
def test_a_quantized_block_with_a_non_finite_scale_is_refused_naming_the_tensor(
        command: str, scale: int, tmp_path: Path, base: bytes,  # noqa: F811
        capfd: pytest.CaptureFixture[str]) -> None:
    from gguf import GGUFReader

    path = tmp_path / "m.gguf"
    path.write_bytes(base)
    tensor = next(t for t in GGUFReader(path).tensors if t.tensor_type.name == "Q8_0" and "blk.0.attn_q" in t.name)
    data = bytearray(base)
    data[tensor.data_offset + 34:tensor.data_offset + 36] = struct.pack("<H", scale)  # the second block's f16 scale
    path.write_bytes(bytes(data))
    argv = (["run", LLAMA, "--weights", path, "--input", "x=[[1, 2]]", "-o", tmp_path / "y.npz"] if command == "run"
            else ["compile", LLAMA, "--weights", path, "-o", tmp_path / "m.onnx"])
    r = run_cli(argv, capfd)
    judge(r, "'blk.0.attn_q.weight' (Q8_0) dequantizes to a value that is not finite")
    assert "warning" not in r.err.lower()


def test_a_refused_safetensors_header_is_not_quoted_whole(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    import json

    header = json.dumps({"a": {"dtype": "X" * 100_000, "shape": [1], "data_offsets": [0, 4]}}).encode()
    path = tmp_path / "m.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(4))
    r = run_cli(["run", LLAMA, "--weights", path, "--input", "x=[[1, 2]]", "-o", tmp_path / "y.npz"], capfd)
    judge(r, "cannot read safetensors file")
    assert len(r.err) < 1000
