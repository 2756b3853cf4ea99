"""GGUF files of issue 28's families (Qwen3, Phi-3, GPT-NeoX, Mixtral, Gemma 2 and a tiny Gemma 3), written as
llama.cpp's converter writes them (tests/weights/gguf_testlib.py: its keys, gguf's tensor names, NeoX's regrouped query_key_value,
Mixtral's stacked experts and permuted q/k, Gemma's 1 + γ norms), read with --weights.

The reference is HF's model of the original config with its weights passed through the file's format (gguf's
own quantize and dequantize: what the file holds). transformers' GGUF reader is a second reference where it
reads the family: Qwen3 and Phi-3 (it has no gptneox reader, reads Mixtral's "llama" file without experts, and
for Gemma 2 ignores the file's soft-caps and sets query_pre_attn_scalar to its default 256 where llama.cpp
scales by 1/√head_dim)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from transformers import AutoConfig, AutoModelForCausalLM, MixtralConfig, MixtralForCausalLM
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

from pseudoformer.base.errors import UsageError
from pseudoformer.deploy import lower, run_onnx
from pseudoformer.model import load
from pseudoformer.quantization import options
from pseudoformer.weights.gguf_checkpoint import gguf_config
from tests.models import gemma_qwen3_cases, neox_phi3_cases
from tests.weights.gguf_testlib import write_gguf
from tests.weights.test_weights_gguf import TOL, close, greedy_equals_hf, hf_logits

MODELS = Path(__file__).resolve().parents[2] / "models"
FAMILIES = ("qwen3", "phi3", "gpt_neox", "mixtral", "gemma2", "gemma3")
# Widths that are multiples of 32 (a Q8_0/Q4_0 block), head_dim = d_e/H (transformers' Qwen3 reader assumes it)
WIDE = dict(hidden_size=64, intermediate_size=96, head_dim=16)
MIXTRAL = dict(vocab_size=61, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
               max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=500.0, num_local_experts=4,
               num_experts_per_tok=2, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, **WIDE)
X = np.array([[1, 5, 9, 20, 33, 7, 60, 2, 14, 3, 8], [3, 3, 41, 17, 8, 0, 12, 59, 22, 40, 6]])  # past the windows


def hf_model(kind: str, seed: int = 0, **changes: object) -> torch.nn.Module:
    if kind == "mixtral":
        torch.manual_seed(seed)
        m = MixtralForCausalLM(MixtralConfig(**{**MIXTRAL, **changes})).eval()
        with torch.no_grad():
            for name, p in m.named_parameters():
                if "norm" in name:
                    p.add_(torch.randn_like(p) * 0.2)
        return m
    if kind == "gpt_neox":  # llama.cpp's converter writes no RoPE base for NeoX: llama.cpp's 10000
        return neox_phi3_cases.hf_model(kind, seed, rotary_emb_base=10000.0, **changes)
    if kind == "phi3":
        return neox_phi3_cases.hf_model(kind, seed, **changes)
    # Gemma 2: the converter drops lm_head (tied) and writes no RoPE base (llama.cpp's 10000). Gemma 3: llama.cpp
    # has a global layer every 6th and a local base of 10000, neither in the file. Both: llama.cpp scales the
    # scores by 1/√head_dim.
    extra: dict[str, object] = {
        "gemma2": dict(tie_word_embeddings=True, query_pre_attn_scalar=16, rope_parameters={
            "rope_type": "default", "rope_theta": 10000.0}),
        "gemma3": dict(query_pre_attn_scalar=16, sliding_window_pattern=6, rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 2000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
    }.get(kind, {})
    return gemma_qwen3_cases.hf_model(kind, seed, **{**WIDE, **extra, **changes})


def formats(fmt: Q):
    return lambda name, shape: fmt if shape[-1] % 32 == 0 else Q.F32


def as_stored(model: torch.nn.Module, fmt: Q) -> torch.nn.Module:
    """The model with each weight the file holds in ``fmt`` replaced by what the file holds (gguf's dequantize
    of gguf's quantize; rows are quantized on their own, so llama.cpp's row permutations commute with it)."""
    with torch.no_grad():
        for _, p in model.named_parameters():
            a = p.detach().numpy()
            if a.ndim < 2 or formats(fmt)("", a.shape) == Q.F32:
                continue
            if fmt == Q.F16:
                stored = a.astype(np.float16).astype(np.float32)
            else:
                stored = gguf.quants.dequantize(gguf.quants.quantize(a, fmt), fmt)
            p.copy_(torch.from_numpy(stored.reshape(a.shape)))
    return model


def written(tmp: Path, kind: str, fmt: Q, seed: int = 0) -> tuple[Path, torch.nn.Module]:
    """A GGUF of a random ``kind`` model in ``fmt``, and HF's model of what it holds."""
    path = tmp / f"{kind}-{fmt.name}.gguf"
    model = hf_model(kind, seed)
    write_gguf(path, model, kind, formats(fmt))
    return path, as_stored(model, fmt)


@pytest.mark.parametrize("fmt", [Q.F32, Q.F16, Q.Q8_0, Q.Q4_0], ids=lambda q: q.name)
@pytest.mark.parametrize("kind", FAMILIES)
def test_logits_equal_hf_with_the_files_weights(tmp_path: Path, kind: str, fmt: Q) -> None:
    path, ref = written(tmp_path, kind, fmt)
    close(load(MODELS / f"{kind}.alg", weights=path).run(x=X)["Y"], hf_logits(ref, X))


@pytest.mark.parametrize("kind", FAMILIES)
def test_the_config_is_the_checkpoints(tmp_path: Path, kind: str) -> None:
    path, ref = written(tmp_path, kind, Q.F32)
    ours, c = gguf_config(path), ref.config
    assert ours["model_type"] == c.model_type
    for key in ("hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads", "vocab_size"):
        assert ours[key] == getattr(c, key), key
    if kind == "gemma3":
        assert (ours["rope_theta"], ours["rope_scaling"], ours["query_pre_attn_scalar"]) == (
            2000.0, {"rope_type": "linear", "factor": 2.0}, 16)
    if kind == "gemma2":
        assert (ours["attn_logit_softcapping"], ours["final_logit_softcapping"], ours["sliding_window"],
                ours["query_pre_attn_scalar"], ours["tie_word_embeddings"]) == (1.5, 4.0, 5, 16, True)
    if kind == "mixtral":
        assert (ours["num_local_experts"], ours["num_experts_per_tok"]) == (4, 2)
    if kind == "gpt_neox":
        assert (ours["partial_rotary_factor"], ours["use_parallel_residual"], ours["hidden_act"]) == (
            0.25, True, "gelu")
    if kind == "phi3":
        assert ours["sliding_window"] == 5


@pytest.mark.parametrize("kind", ["qwen3", "phi3"])
@pytest.mark.parametrize("fmt", [Q.F16, Q.Q4_0], ids=lambda q: q.name)
def test_logits_equal_transformers_reading_the_same_file(tmp_path: Path, kind: str, fmt: Q) -> None:
    """Phi-3 without a window here: transformers' GGUF reader does not read attention.sliding_window. Nor does
    it read Qwen3's attention.key_length: it keeps Qwen3Config's head_dim, 128 (real Qwen3 files' own), so the
    tiny model's 16 is given to it."""
    path = tmp_path / f"{kind}.gguf"
    model = hf_model(kind) if kind == "qwen3" else neox_phi3_cases.hf_model(kind, 0, sliding_window=None)
    write_gguf(path, model, kind, formats(fmt))
    config = AutoConfig.from_pretrained(tmp_path, gguf_file=path.name)
    if kind == "qwen3":
        assert config.head_dim == 128
        config.head_dim = WIDE["head_dim"]
    ref = AutoModelForCausalLM.from_config(config).eval()
    assert not ref.load_state_dict(load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=ref)["tensors"],
                                   strict=False).missing_keys
    close(load(MODELS / f"{kind}.alg", weights=path).run(x=X)["Y"], hf_logits(ref, X))


@pytest.mark.parametrize("kind", ["phi3", "gpt_neox", "mixtral"])
def test_q4_0_blocks_follow_the_packed_and_regrouped_rows(tmp_path: Path, kind: str) -> None:
    """Without --quantize the file's Q4_0 blocks become MatMulNBits: Phi-3's packed qkv and gate_up cut apart,
    NeoX's q | k | v rows regrouped into heads, Mixtral's permuted q/k (its experts stay float). At accuracy
    level 0 onnxruntime computes with exactly the dequantized weights."""
    path, ref = written(tmp_path, kind, Q.Q4_0)
    onnx = lower(load(MODELS / f"{kind}.alg", weights=path), quantize=options("int8", accuracy_level=0))
    blocks = [n for n in onnx.graph.node if n.op_type == "MatMulNBits"]
    assert blocks and {a.i for n in blocks for a in n.attribute if a.name == "bits"} == {4}
    close(run_onnx(onnx, {"x": X})["Y"], hf_logits(ref, X))


@pytest.mark.parametrize("kind", ["gpt_neox", "qwen3", "mixtral", "gemma2"])
def test_greedy_generation_equals_hf(tmp_path: Path, kind: str) -> None:
    path, ref = written(tmp_path, kind, Q.Q8_0, seed=3)
    greedy_equals_hf(ref, MODELS / f"{kind}.alg", path)


def test_the_tolerance_sees_a_misread_tensor(tmp_path: Path) -> None:
    """NeoX's query_key_value read as it lies in the file (q | k | v, not regrouped into heads) is caught."""
    path, ref = written(tmp_path, "gpt_neox", Q.F32)
    model = load(MODELS / "gpt_neox.alg", weights=path)
    want = hf_logits(ref, X)
    w = dict(model.weights)
    w["layers.0.W.heads.0.W_k"], w["layers.0.W.heads.1.W_q"] = w["layers.0.W.heads.1.W_q"], w["layers.0.W.heads.0.W_k"]
    with pytest.raises(AssertionError):
        close(replace(model, weights=w).run(x=X)["Y"], want, TOL)


def test_phi3_longrope_factors_are_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "phi3-128k.gguf"
    factors = np.ones(8, np.float32)
    write_gguf(path, hf_model("phi3"), "phi3", formats(Q.F32),
               extra={"rope_factors_long.weight": factors, "rope_factors_short.weight": factors})
    with pytest.raises(UsageError, match="rope_factors_long.weight holds LongRoPE's factors"):
        load(MODELS / "phi3.alg", weights=path)


def test_neox_sequential_block_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "neox-sequential.gguf"
    write_gguf(path, neox_phi3_cases.hf_model("gpt_neox", 0, use_parallel_residual=False), "gpt_neox", formats(Q.F32))
    with pytest.raises(UsageError, match="use_parallel_residual"):
        load(MODELS / "gpt_neox.alg", weights=path)
