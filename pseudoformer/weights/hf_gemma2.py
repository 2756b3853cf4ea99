"""HuggingFace Gemma 2 checkpoints (Gemma2ForCausalLM, model_type gemma2) -> models/gemma2.alg.

Llama's layout (hf_llama.py: [out, in] weights, q/k/v cut into heads of head_dim rows, the embedding
transposed) with two more norms per layer: input_layernorm and post_attention_layernorm wrap the attention
(γ¹, γ²), pre_ and post_feedforward_layernorm the MLP (γ³, γ⁴). The norms' weights are stored as γ and
applied as (1 + γ), which gemma2.alg's gemma_norm says, so they load as they are. The layer types
(sliding or full) become P (every P-th layer full) and the window w.
"""

from __future__ import annotations

from dataclasses import replace

from .hf_config_readers import layer_pattern, rope
from .hf_llama import LAYER, LLAMA
from .hf_table import Allowed, Config, ConfigField, Divisible, Flag, Float, Hyper, Int, Table, Tensor, TokenId


def softcaps(config: Config, hyper: Hyper, refusals: list[str]) -> Hyper:
    """The caps of the scores (c) and of the logits (c_f): gemma2.alg caps both, so a null one is refused."""
    out: Hyper = {}
    for ours, key in (("c", "attn_logit_softcapping"), ("c_f", "final_logit_softcapping")):
        value = config.get(key, 50.0 if ours == "c" else 30.0)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            refusals.append(f"{key} = {value!r}: gemma2.alg soft-caps with a positive number")
        else:
            out[ours] = float(value)
    return out


def config(vocab: int, positions: int) -> tuple[ConfigField, ...]:
    """Gemma's config fields, with HF's defaults (Gemma2Config's and Gemma3TextConfig's differ in these two)."""
    return (
        Int("d_e", "hidden_size", 2304),
        Int("H", "num_attention_heads", 8),
        Int("H_kv", "num_key_value_heads", 4),
        Int("L", "num_hidden_layers", 26),
        Int("d_attn", "head_dim", 256),
        Int("d_mlp", "intermediate_size", 9216),
        Int("N_V", "vocab_size", vocab),
        Float("eps", "rms_norm_eps", 1e-6),
        Float("s", "query_pre_attn_scalar", 256.0),
        Int("ell_max", "max_position_embeddings", positions),
        TokenId("bos_token", "bos_token_id"),
        TokenId("eos_token", "eos_token_id"),
    )


REFUSALS = (
    Divisible("H", "H_kv", "{num} is not a multiple of {den}"),
    Divisible("d_attn", 2, "{num} is odd: RoPE rotates pairs of coordinates"),
    Allowed("hidden_activation", "gelu_pytorch_tanh", ("gelu_pytorch_tanh", "gelu_new"),
            "the MLP is GeGLU with GELU in its tanh form ('gelu_pytorch_tanh')"),
    Flag("attention_bias", False, "the .alg's projections have no biases"),
    Flag("use_bidirectional_attention", False, "the .alg's attention is causal"),
)
# Llama's tensors, and the norms after the attention and around the MLP.
NORMS = (
    Tensor(f"{LAYER}pre_feedforward_layernorm.weight", f"{LAYER}gamma_3", 1),
    Tensor(f"{LAYER}post_feedforward_layernorm.weight", f"{LAYER}gamma_4", 1),
)

TABLE: Table = replace(
    LLAMA,
    model_types=("gemma2",),
    label="gemma2",
    kind="gemma2",
    algorithms=("Gemma2",),
    config=(*config(256000, 8192), rope, layer_pattern(2), softcaps),
    refusals=REFUSALS,
    tensors=(*LLAMA.tensors, *NORMS),
)
