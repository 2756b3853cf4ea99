"""HuggingFace Gemma 3 text checkpoints (Gemma3ForCausalLM, model_type gemma3_text) -> models/gemma3.alg.

Gemma 2's layout (hf_gemma2.py) and the per-head norms of the queries and keys (q_norm, k_norm: one
weight of head_dim, shared by the heads, stored as γ and applied as (1 + γ)). No soft-capping: a cap is
refused. Five local layers to a global one by default (sliding_window_pattern 6), and two RoPE bases:
the global layers' (with their scaling) and rope_local_base_freq (hf_config_readers.gemma3_rope).
"""

from __future__ import annotations

from dataclasses import replace

from .hf_config_readers import gemma3_rope, layer_pattern
from .hf_gemma2 import REFUSALS, config
from .hf_gemma2 import TABLE as GEMMA2
from .hf_llama import LAYER
from .hf_table import Allowed, Table, Tensor

NO_CAP = "gemma3.alg does not soft-cap (Gemma 3 checkpoints have no cap)"

TABLE: Table = replace(
    GEMMA2,
    model_types=("gemma3_text",),
    label="gemma3_text",
    kind="gemma3_text",
    algorithms=("Gemma3",),
    config=(*config(262208, 131072), gemma3_rope, layer_pattern(6)),
    refusals=(*REFUSALS,
              Allowed("attn_logit_softcapping", None, (None,), NO_CAP),
              Allowed("final_logit_softcapping", None, (None,), NO_CAP)),
    tensors=(*GEMMA2.tensors,
             Tensor(f"{LAYER}self_attn.q_norm.weight", f"{LAYER}W.gamma_q", 1),
             Tensor(f"{LAYER}self_attn.k_norm.weight", f"{LAYER}W.gamma_k", 1)),
)
