"""HuggingFace Llama, Mistral and Qwen2 checkpoints -> llama.alg, mistral.alg, qwen2.alg: three tables.

The three share one layout (LlamaForCausalLM's): nn.Linear weights stored [out, in], the paper's
layout, so only the token embedding is transposed. q_proj's rows are the H query heads one after
another, k_proj's and v_proj's the H_kv key/value heads; each is cut into heads of head_dim rows.
HF converts Meta's checkpoints to the "rotate half" pairing (i, i + d/2) when it imports them, which
is the pairing models/llama.alg's RoPE uses, so no row is permuted here. Qwen2 adds q/k/v biases;
Mistral a sliding window. With tie_word_embeddings the unembedding W_u is the embedding table itself.
"""

from __future__ import annotations

from dataclasses import replace

from .hf_config_readers import full_attention_only, mistral_window, qwen2_no_window, rope
from .hf_table import (
    Allowed,
    Divisible,
    Flag,
    Float,
    Heads,
    Ignore,
    Int,
    Table,
    Tensor,
    Tie,
    TokenId,
    Transpose,
    config_flag,
    config_unset,
)

# The family of key/value heads in models/llama.alg: `For g ∈ [H_kv]: W^g_k, W^g_v`.
KV_HEADS = "g"
LAYER = "layers.{l}."
TIED = config_flag("tie_word_embeddings")


def _projection(hf: str, kind: str, family: str, count: str) -> tuple[Tensor, ...]:
    """q_proj / k_proj / v_proj, weight and bias, cut into heads along the output rows."""
    ours = f"{LAYER}W.{family}.{{h}}."
    return (Tensor(f"{LAYER}self_attn.{hf}.weight", f"{ours}W_{kind}", 2, heads=Heads(count)),
            Tensor(f"{LAYER}self_attn.{hf}.bias", f"{ours}b_{kind}", 1, heads=Heads(count)))


LLAMA = Table(
    model_types=("llama",),
    label="llama",
    kind="llama",
    prefix="model.",
    algorithms=("Llama", "Mistral", "Qwen2"),
    config=(
        Int("d_e", "hidden_size", 4096),
        Int("H", "num_attention_heads", 32),
        Int("H_kv", "num_key_value_heads", lambda h: int(h["H"])),
        Int("L", "num_hidden_layers", 32),
        Int("d_attn", "head_dim", lambda h: int(h["d_e"]) // int(h["H"]) or 1),
        Int("d_mlp", "intermediate_size", 11008),
        Int("N_V", "vocab_size", 32000),
        Float("eps", "rms_norm_eps", 1e-6),
        Int("ell_max", "max_position_embeddings", 2048),
        rope,
        full_attention_only,
        # Generation tokens (llama.toml lists the same ones).
        TokenId("bos_token", "bos_token_id"),
        TokenId("eos_token", "eos_token_id"),
    ),
    refusals=(
        Divisible("d_e", "H", unless="head_dim"),
        Divisible("H", "H_kv", "{num} is not a multiple of {den}"),
        Divisible("d_attn", 2, "{num} is odd: RoPE rotates pairs of coordinates"),
        Allowed("hidden_act", "silu", ("silu",), "the MLP is SwiGLU, with SiLU ('silu')"),
        Flag("attention_bias", False, "llama.alg's projections have no biases"),
        Flag("mlp_bias", False, "llama.alg's projections have no biases"),
        Allowed("partial_rotary_factor", 1.0, (1, 1.0, None), "RoPE rotates every coordinate of a head"),
    ),
    tensors=(
        Tensor("embed_tokens.weight", "W_e", 2, (Transpose(),)),
        Tensor("lm_head.weight", "W_u", 2, when=config_unset("tie_word_embeddings")),
        # Tied, W_u is the embedding table, and a save may still carry a copy of it as lm_head.
        Tie(sources=("embed_tokens.weight",), copies=("lm_head.weight",), ours="W_u", when=TIED,
            message="shape {shape}, not equal to embed_tokens.weight, although config.json says "
                    "tie_word_embeddings = true"),
        Tensor("norm.weight", "gamma", 1),
        *_projection("q_proj", "q", "heads", "H"),
        *_projection("k_proj", "k", KV_HEADS, "H_kv"),
        *_projection("v_proj", "v", KV_HEADS, "H_kv"),
        Tensor(f"{LAYER}self_attn.o_proj.weight", f"{LAYER}W.W_o", 2),
        Tensor(f"{LAYER}input_layernorm.weight", f"{LAYER}gamma_1", 1),
        Tensor(f"{LAYER}post_attention_layernorm.weight", f"{LAYER}gamma_2", 1),
        Tensor(f"{LAYER}mlp.gate_proj.weight", f"{LAYER}W_1", 2),
        Tensor(f"{LAYER}mlp.down_proj.weight", f"{LAYER}W_2", 2),
        Tensor(f"{LAYER}mlp.up_proj.weight", f"{LAYER}W_3", 2),
        # The rotary frequencies, a buffer that older transformers versions saved with the weights.
        Ignore(f"{LAYER}self_attn.rotary_emb.inv_freq"),
        Ignore("rotary_emb.inv_freq"),
    ),
)

# Mistral: Llama's layout and a sliding window (w); its projections never have biases.
MISTRAL = replace(
    LLAMA,
    model_types=("mistral",),
    label="mistral",
    kind="mistral",
    config=(*(f for f in LLAMA.config if f is not full_attention_only), mistral_window),
    refusals=tuple(r for r in LLAMA.refusals if not isinstance(r, Flag)),
)

# Qwen2: Llama's layout with q/k/v biases; its sliding window is refused where a layer would use it.
QWEN2 = replace(
    LLAMA,
    model_types=("qwen2",),
    label="qwen2",
    kind="qwen2",
    config=(*LLAMA.config, qwen2_no_window),
    refusals=tuple(r for r in LLAMA.refusals if not isinstance(r, Flag)),
)

TABLES = (LLAMA, MISTRAL, QWEN2)
MODEL_TYPES = tuple(t for table in TABLES for t in table.model_types)
