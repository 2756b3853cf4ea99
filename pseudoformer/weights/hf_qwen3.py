"""HuggingFace Qwen3 checkpoints (Qwen3ForCausalLM, model_type qwen3) -> models/qwen3.alg.

Llama's layout (hf_llama.py) and the per-head RMS norms of the queries and keys (q_norm, k_norm: one
weight of head_dim, shared by the heads, applied before RoPE). Its sliding window is refused where a
layer would use it, as Qwen2's is.
"""

from __future__ import annotations

from dataclasses import replace

from .hf_config_readers import qwen2_no_window
from .hf_llama import LAYER, LLAMA
from .hf_table import Flag, Table, Tensor

TABLE: Table = replace(
    LLAMA,
    model_types=("qwen3",),
    label="qwen3",
    kind="qwen3",
    algorithms=("Qwen3",),
    config=(*LLAMA.config, qwen2_no_window),
    refusals=(*(r for r in LLAMA.refusals if not isinstance(r, Flag)),
              Flag("attention_bias", False, "qwen3.alg's projections have no biases")),
    tensors=(*LLAMA.tensors,
             Tensor(f"{LAYER}self_attn.q_norm.weight", f"{LAYER}W.gamma_q", 1),
             Tensor(f"{LAYER}self_attn.k_norm.weight", f"{LAYER}W.gamma_k", 1)),
)
