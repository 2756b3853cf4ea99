"""A compile reads a checkpoint one tensor at a time (issue 25): its peak memory grows with the largest
tensor, not with the model.

Two bf16 checkpoints of one Llama shape, 1 and 7 layers, are compiled each in a fresh process whose peak
RSS comes from wait4. The 6 more layers are 6 × 48 MB of float32 weights written to the file; a compile
that reads the model whole (load_weights) grew by 109 MB, a streaming one by the graph of 6 more layers
and nothing else (0.1 MB).
Both compiles read and write the same largest tensor, so it cancels out.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pseudoformer
from pseudoformer.base.errors import UsageError
from pseudoformer.deploy import run_onnx
from pseudoformer.weights import load_weights, open_weights

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from common.checkpoints import parameter_count, write_checkpoint  # noqa: E402

SHAPE = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "rms_norm_eps": 1e-5,
         "attention_bias": False, "mlp_bias": False, "bos_token_id": 1, "eos_token_id": 2, "vocab_size": 512,
         "hidden_size": 1024, "intermediate_size": 3072, "num_attention_heads": 8, "num_key_value_heads": 2,
         "max_position_embeddings": 256, "rope_theta": 10000.0, "tie_word_embeddings": True}


def _peak_rss(args: list[str]) -> int:
    """Peak RSS in bytes of `pseudoformer ARGS` run in a process of its own (this child alone)."""
    proc = subprocess.Popen([sys.executable, "-m", "pseudoformer.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, err.decode()
    return usage.ru_maxrss * 1024


@pytest.mark.parametrize("quantize", [[], ["--quantize", "int4", "--quantize-method", "rtn"]], ids=["fp32", "int4"])
def test_compile_memory_grows_with_the_largest_tensor_not_the_model(tmp_path: Path, quantize: list[str]) -> None:
    peaks, weights = {}, {}
    for layers in (1, 7):
        config = {**SHAPE, "num_hidden_layers": layers}
        write_checkpoint(tmp_path / f"L{layers}", config)
        weights[layers] = 4 * parameter_count(config)
        out = tmp_path / f"L{layers}.onnx"
        peaks[layers] = _peak_rss(["compile", str(ROOT / "models" / "llama.alg"), "--weights", str(tmp_path / f"L{layers}"),
                                   "-o", str(out), *quantize])
        assert out.exists()
        out.unlink()
    more = weights[7] - weights[1]  # 6 layers: 302 MB of float32
    grown = peaks[7] - peaks[1]
    # measured (fp32 and int4): 0.1 MB; reading the model whole (load_weights) grew 109 MB
    assert grown < more / 8, f"peak RSS grew {grown / 1e6:.0f} MB for {more / 1e6:.0f} MB more weights"


def test_lazy_weights_equal_the_loaded_ones(tmp_path: Path) -> None:
    """open_weights' LazyTensors load what load_weights reads, and know the tie from the mapping alone."""
    config = {**SHAPE, "num_hidden_layers": 1, "hidden_size": 64, "intermediate_size": 96, "vocab_size": 80}
    write_checkpoint(tmp_path, config)
    model = pseudoformer.load("llama", weights=tmp_path, bind_weights=False)
    expected = {p.attrs["name"]: (tuple(int(d) for d in p.type.shape), "float32") for p in model.graph.params()}
    eager = load_weights(tmp_path, expected)
    lazy, twins = open_weights(tmp_path, expected)
    assert twins == {"W_e": "W_u"}  # the first of the two in the model's order kept, as from values
    assert list(lazy) == list(eager)
    for name, arr in eager.items():
        assert lazy[name].shape == arr.shape and lazy[name].dtype == arr.dtype
        np.testing.assert_array_equal(lazy[name].load(), arr)
    np.testing.assert_array_equal(eager["W_u"], eager["W_e"].T)


def test_streamed_compile_equals_the_eager_model(tmp_path: Path) -> None:
    """The compiled file (weights read as it is written) computes what the interpreter does with the
    weights read eagerly, the tied unembedding stored once."""
    config = {**SHAPE, "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 96, "vocab_size": 80}
    write_checkpoint(tmp_path / "ckpt", config)
    compiled = pseudoformer.compile("llama", weights=tmp_path / "ckpt")
    path = compiled.save(tmp_path / "m.onnx")
    eager = pseudoformer.load("llama", weights=tmp_path / "ckpt")
    assert "W_e" not in eager.weights and "W_e" not in compiled.model.weights  # tied: stored once
    x = np.array([[1, 5, 7, 3]], dtype=np.int64)
    want = eager.run(x=x)
    got = run_onnx(str(path), {"x": x})
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-4)


def test_refusal_judges_the_streaming_peak(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A streamed checkpoint is refused by what streaming holds (1 GiB and twice the largest tensor),
    not by the whole model's bytes: memory for one but not the other compiles streamed, refuses eager."""
    import pseudoformer.model_checks as checks

    config = {**SHAPE, "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 96, "vocab_size": 80}
    write_checkpoint(tmp_path, config)
    largest = 4 * 96 * 64  # an MLP matrix, d_mlp × d_e
    monkeypatch.setattr(checks, "STREAMING_BASE", 0)
    monkeypatch.setattr(checks, "available_memory", lambda: 2 * largest + 1)  # less than the whole model
    pseudoformer.load("llama", weights=tmp_path, lazy_weights=True)
    with pytest.raises(UsageError, match="the parameters of Llama take"):
        pseudoformer.load("llama", weights=tmp_path)
    monkeypatch.setattr(checks, "available_memory", lambda: 2 * largest - 1)
    with pytest.raises(UsageError, match="streamed one tensor at a time, the parameters of Llama need"):
        pseudoformer.load("llama", weights=tmp_path, lazy_weights=True)
