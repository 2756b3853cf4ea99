"""LoRA on a SmolLM2-shaped Llama (llama_lora_loss.alg): the frozen weights those of a HF Llama built from
SmolLM2-135M's config (fewer layers where asked), the adapters initialised as the LoRA paper does (A
random, B = 0, so that training starts from the pretrained model's loss), and HF's model with the same
per-head updates in torch. Shared by the tests and benchmarks/bench_train.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from pseudoformer.model import Model
from tests.models.llama_cases import hf_model
from tests.training.torch_cases import _ours

ADAPTERS = ("A_q", "B_q", "A_v", "B_v")
# HuggingFaceTB/SmolLM2-135M's config.json, without its layer count
SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3,
               head_dim=64, max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0,
               tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)


def is_adapter(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in ADAPTERS


def adapter_values(config: Any, rank: int = 8, seed: int = 0) -> dict[str, np.ndarray]:
    """Our adapters for a HF Llama config: A ~ U(±1/√d_x) (peft's kaiming-uniform bound), B = 0."""
    rng = np.random.default_rng(seed)
    d_x, d_attn = config.hidden_size, config.head_dim
    out = {}
    for i in range(config.num_hidden_layers):
        for tag, kind, heads in (("heads", "q", config.num_attention_heads), ("g", "v", config.num_key_value_heads)):
            for h in range(heads):
                pre = f"theta.layers.{i}.W.{tag}.{h}."
                out[f"{pre}A_{kind}"] = rng.uniform(-1, 1, (rank, d_x)).astype(np.float32) / np.float32(np.sqrt(d_x))
                out[f"{pre}B_{kind}"] = np.zeros((d_attn, rank), np.float32)
    return out


def lora_model(directory: Path, rank: int = 8, scale: float = 16.0, seed: int = 0) -> Model:
    """Our LoRA loss model over the HF Llama checkpoint in `directory`, with adapter_values."""
    model = _ours("llama_lora_loss.alg", "models/llama.alg", directory, ("bos_token", "eos_token", "ell_max"),
                  (f"r={rank}", f"rho={scale}"), entry="LoRALlamaLoss")
    model.weights.update(adapter_values(read_config(directory), rank, seed))
    return model


def lora_llama(directory: Path, layers: int, rank: int = 8, scale: float = 16.0, seed: int = 0,
               **sizes: Any) -> tuple[Any, Model]:
    """(the HF model, our LoRA loss model over its weights), the HF checkpoint saved in `directory`."""
    hf = hf_model("llama", seed, **{**SMOLLM2, **sizes, "num_hidden_layers": layers})
    hf.save_pretrained(directory)
    return hf, lora_model(directory, rank, scale, seed)


def read_config(directory: Path) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig.from_pretrained(directory)


class TorchLoRA(torch.nn.Module):
    """A frozen HF projection plus (ρ/r) B A per head, with our adapters' values (heads of d_attn rows)."""

    def __init__(self, base: torch.nn.Linear, a: list[np.ndarray], b: list[np.ndarray], scale: float) -> None:
        super().__init__()
        self.base, self.scale = base, scale
        self.a = torch.nn.Parameter(torch.from_numpy(np.concatenate(a)))  # [heads·r, d_x]
        self.b = torch.nn.Parameter(torch.from_numpy(np.stack(b)))  # [heads, d_attn, r]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        heads, _, r = self.b.shape
        low = (x @ self.a.T).unflatten(-1, (heads, r))  # [..., heads, r]
        return self.base(x) + self.scale * torch.einsum("...hr,hdr->...hd", low, self.b).flatten(-2)


def torch_lora(hf: Any, adapters: dict[str, np.ndarray], rank: int = 8, scale: float = 16.0) -> Any:
    """`hf` with these adapters (ours, by name) on every layer's q_proj and v_proj, only they trainable."""
    for p in hf.parameters():
        p.requires_grad_(False)
    w = adapters
    for i, layer in enumerate(hf.model.layers):
        att, cfg = layer.self_attn, hf.config
        for proj, kind, heads, tag in (("q_proj", "q", cfg.num_attention_heads, "heads"),
                                       ("v_proj", "v", cfg.num_key_value_heads, "g")):
            pre = f"theta.layers.{i}.W.{tag}."
            a = [w[f"{pre}{h}.A_{kind}"] for h in range(heads)]
            b = [w[f"{pre}{h}.B_{kind}"] for h in range(heads)]
            setattr(att, proj, TorchLoRA(getattr(att, proj), a, b, scale / rank))
    return hf
