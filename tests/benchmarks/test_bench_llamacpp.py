"""bench_int4.py's llama.cpp contender.

The GGUF conversion (benchmarks/llamacpp_gguf.py) runs without llama.cpp: the file it writes is read back by
our GGUF reader (checked against files llama.cpp's converter wrote, tests/weights) and must give the
checkpoint's tensors bit for bit and its config. llama.cpp itself runs only where its venv is named by
$PSEUDOFORMER_LLAMACPP_PYTHON (CI has none): a tiny Llama, quantized to Q4_0 by llama.cpp and timed, its
greedy logits and the BF16 file's checked against HF's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

from common.checkpoints import SHAPES, write_checkpoint  # noqa: E402
from common.llamacpp_bench import TINY, rung_config  # noqa: E402
from common.llamacpp_gguf import convert  # noqa: E402
from llamacpp_check import agreement  # noqa: E402

from pseudoformer.weights.gguf_checkpoint import open_gguf  # noqa: E402
from pseudoformer.weights.safetensors_io import read_safetensors  # noqa: E402

LLAMACPP = os.environ.get("PSEUDOFORMER_LLAMACPP_PYTHON")


@pytest.mark.parametrize("rung", ["SmolLM2-135M", "Qwen2.5-0.5B"])
def test_gguf_holds_the_checkpoint(rung: str, tmp_path: Path) -> None:
    """Llama (q and k rows permuted as llama.cpp's converter does) and Qwen2 (biases, nothing permuted)."""
    config = {**SHAPES[rung], **TINY}
    write_checkpoint(tmp_path, config)
    convert(tmp_path, tmp_path / "bf16.gguf")
    ckpt = open_gguf(tmp_path / "bf16.gguf")
    want = read_safetensors(tmp_path / "model.safetensors")
    assert sorted(ckpt.tensors) == sorted(want)
    for name, a in want.items():
        assert np.array_equal(ckpt.tensors[name].load(), a), name
    for key in ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                "num_key_value_heads", "vocab_size", "rope_theta", "max_position_embeddings"):
        assert ckpt.config[key] == config[key], key
    assert ckpt.config["rms_norm_eps"] == pytest.approx(config["rms_norm_eps"], rel=1e-6)
    assert ckpt.config["tie_word_embeddings"]


def test_gguf_refuses_other_families(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(ValueError, match="gpt2"):
        convert(tmp_path, tmp_path / "out.gguf")


def test_agreement_measures() -> None:
    rng = np.random.default_rng(0)
    hf = rng.standard_normal((4, 50))
    same = agreement(hf, hf, hf.argmax(-1).tolist())
    assert same["top1"] == 1.0 and same["rel_err_max"] == 0.0 and same["corr_min"] == pytest.approx(1.0)
    other = agreement(hf, rng.standard_normal((4, 50)), [int(hf[0].argmin())] * 4)
    assert other["top1"] < 1.0 and other["rel_err_median"] > 0.5 and other["corr_min"] < 0.9


def test_tiny_rung_is_bench_int4s_tiny_llama() -> None:
    from common.decoding import SHAPES as BENCH_SHAPES

    defines = dict(d.split("=") for d in BENCH_SHAPES["tiny"][1])
    c = rung_config("tiny-llama")
    assert (c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"], c["hidden_size"],
            c["head_dim"], c["intermediate_size"], c["vocab_size"]) == tuple(
        int(defines[k]) for k in ("L", "H", "H_kv", "d_e", "d_attn", "d_mlp", "N_V"))


def test_skipped_without_llamacpp_says_why(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    env = {k: v for k, v in os.environ.items() if k != "PSEUDOFORMER_LLAMACPP_PYTHON"}
    proc = subprocess.run([sys.executable, str(BENCH / "bench_int4.py"), "--quick", "--part", "models",
                           "--contenders", "ort", "llamacpp", "--genai-root", str(tmp_path)],
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "llamacpp skipped: no llama.cpp: set PSEUDOFORMER_LLAMACPP_PYTHON" in proc.stdout, proc.stdout
    assert [ln.split(" | ")[3] for ln in proc.stdout.splitlines() if ln.startswith("| tiny |")] == ["ort"]


@pytest.mark.skipif(not LLAMACPP, reason="no llama.cpp: PSEUDOFORMER_LLAMACPP_PYTHON names no venv with "
                    "llama-cpp-python (built from source: ../shared/anchors/llama-cpp.md)")
def test_llamacpp_contender_runs_and_agrees_with_hf(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "bench_int4.py"), "--quick", "--part", "models",
                           "--contenders", "ort", "llamacpp", "--genai-root", str(tmp_path),
                           "--llamacpp-python", str(LLAMACPP)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [ln.split(" | ") for ln in proc.stdout.splitlines() if ln.startswith("| tiny |")]
    assert [r[3] for r in rows] == ["ort", "llamacpp"], proc.stdout
    assert rows[1][4].endswith("×)") and rows[1][5] not in ("", "nan"), proc.stdout  # per token ÷ ORT
    for name in ("q4_0.gguf", "bf16.gguf"):
        assert (tmp_path / "tiny-llama" / name).exists()
    found = {m["file"]: m for m in re.finditer(
        r"llamacpp (?P<file>\S+) against HF float32 .*?top-1 agreement (?P<top1>[\d.]+), relative error of the "
        r"logits median (?P<rel>[\d.]+) .*?correlation ≥ (?P<corr>-?[\d.]+)", proc.stdout)}
    assert set(found) == {"q4_0.gguf", "bf16.gguf"}, proc.stdout
    # BF16: the checkpoint's own values, llama.cpp rounding activations to bfloat16 in its products
    assert float(found["bf16.gguf"]["corr"]) >= 0.999 and float(found["bf16.gguf"]["rel"]) <= 0.05, proc.stdout
    # Q4_0: 16 levels a block of 32 (and the unembedding at llama.cpp's fallback for 64 columns) still tracks HF
    assert float(found["q4_0.gguf"]["corr"]) >= 0.9 and float(found["q4_0.gguf"]["rel"]) <= 0.5, proc.stdout
