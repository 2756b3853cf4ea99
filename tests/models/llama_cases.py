"""Llama, Mistral and Qwen2 from HF configs with random weights (norms and biases perturbed), saved as
checkpoints, and our model of each: models/{llama,mistral,qwen2}.alg loaded from the checkpoint, or the
decoder those files elaborate to, built by hand (tests/passes/llama_graphs.py) with the same weights.

The hand-built graph lets the passes, backends, cache and generation be checked against HF on their
own; the .alg sources must give the same numbers (SOURCES runs every case on both)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PreTrainedModel,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from pseudoformer.config import Config
from pseudoformer.model import Model, load
from pseudoformer.weights import hf_hyperparameters, load_weights, read_hf_config
from tests.passes import llama_graphs

MODELS = Path(__file__).resolve().parents[2] / "models"
HF = {"llama": (LlamaConfig, LlamaForCausalLM), "mistral": (MistralConfig, MistralForCausalLM),
      "qwen2": (Qwen2Config, Qwen2ForCausalLM)}
TINY = dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=500.0,
            tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
# Mistral's window, shorter than the sequences the tests run, so that it hides keys.
WINDOW = 5
SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
               num_key_value_heads=3, head_dim=64, max_position_embeddings=8192, rms_norm_eps=1e-5,
               rope_theta=100000.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
KINDS = tuple(HF)

SOURCES = ["ir", "alg"]


def hf_config(kind: str, **sizes: object) -> object:
    config_class, _ = HF[kind]
    extra = {"sliding_window": WINDOW} if kind == "mistral" else {}
    return config_class(**{**TINY, **extra, **sizes})


def hf_model(kind: str, seed: int = 0, **sizes: object) -> PreTrainedModel:
    """A random model of `kind`, its norms (and Qwen2's biases) perturbed so that a misplaced one shows."""
    torch.manual_seed(seed)
    _, model_class = HF[kind]
    m = model_class(hf_config(kind, **sizes)).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    return m


def hand_built(kind: str, directory: Path) -> Model:
    """The decoder llama.alg (mistral.alg, qwen2.alg) elaborates to, with the checkpoint's weights."""
    hp = hf_hyperparameters(read_hf_config(directory))
    assert hp["kappa"] == 1.0, "the hand-built graph has no scaled positions"
    graph = llama_graphs.llama({k: hp[k] for k in llama_graphs.TINY}, bias=kind == "qwen2",
                               window=int(hp["w"]) if kind == "mistral" else 0)
    expected = {p.attrs["name"]: (tuple(int(d) for d in p.type.shape), "float32") for p in graph.params()}
    return Model(graph, load_weights(directory, expected), directory / "config.json", Config(hyperparameters=hp),
                 str(directory))


def ours(kind: str, directory: Path, source: str) -> Model:
    if source == "ir":
        return hand_built(kind, directory)
    return load(MODELS / f"{kind}.alg", weights=directory)
