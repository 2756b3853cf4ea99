"""Gemma 2, Gemma 3 (text) and Qwen3 from HF configs with random weights (norms, the q/k norms and the scales
perturbed), saved as checkpoints, and models/{gemma2,gemma3,qwen3}.alg loaded from them.

The sizes are tiny, the windows shorter than the sequences the tests run and the soft-caps small enough that
random weights reach them: Gemma 2's layers alternate (local, global, ...), Gemma 3's have a global layer every
third (P = 3), a RoPE base of their own on the local layers and linear scaling on the global ones."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    PreTrainedModel,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from pseudoformer.model import Model, load

MODELS = Path(__file__).resolve().parents[2] / "models"
WINDOW = 5
TINY = dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
            head_dim=8, max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
            pad_token_id=0, initializer_range=0.1)
GEMMA = dict(sliding_window=WINDOW, query_pre_attn_scalar=12, hidden_activation="gelu_pytorch_tanh")
EXTRA = {
    "gemma2": dict(**GEMMA, num_hidden_layers=4, attn_logit_softcapping=1.5, final_logit_softcapping=4.0,
                   rope_parameters={"rope_type": "default", "rope_theta": 500.0}, tie_word_embeddings=True),
    "gemma3": dict(**GEMMA, num_hidden_layers=6, sliding_window_pattern=3, tie_word_embeddings=False,
                   rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 2000.0},
                                    "sliding_attention": {"rope_type": "default", "rope_theta": 30.0}}),
    "qwen3": dict(num_hidden_layers=2, rope_parameters={"rope_type": "default", "rope_theta": 500.0},
                  tie_word_embeddings=False),
}
HF = {"gemma2": (Gemma2Config, Gemma2ForCausalLM), "gemma3": (Gemma3TextConfig, Gemma3ForCausalLM),
      "qwen3": (Qwen3Config, Qwen3ForCausalLM)}
KINDS = tuple(HF)
LAYERS = {kind: int(extra["num_hidden_layers"]) for kind, extra in EXTRA.items()}  # type: ignore[call-overload]


def hf_config(kind: str, **changes: object) -> object:
    config_class, _ = HF[kind]
    return config_class(**{**TINY, **EXTRA[kind], **changes})


def hf_model(kind: str, seed: int = 0, **changes: object) -> PreTrainedModel:
    """A random model of `kind`, its norms perturbed so that a misplaced one (or a γ read as 1 + γ) shows."""
    torch.manual_seed(seed)
    _, model_class = HF[kind]
    m = model_class(hf_config(kind, **changes)).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    return m


def ours(kind: str, directory: Path) -> Model:
    return load(MODELS / f"{kind}.alg", weights=directory)
