"""HuggingFace GPT-NeoX (Pythia) checkpoints -> gpt_neox.alg: one table.

GPTNeoXForCausalLM's nn.Linear weights are stored [out, in], the paper's layout. Its packed
query_key_value is head-major: its rows are [H, 3, d_attn], head h's query, key and value rows side
by side (not q|k|v blocks as in GPT-2's c_attn), so it is cut with interleaved heads. Only the first
r = int(d_attn · rotary_pct) coordinates of a head are rotated (transformers 5 writes rotary_pct as
rope_parameters' partial_rotary_factor, and rotary_emb_base as rope_theta). The unembedding embed_out
(lm_head in transformers 5's memory) is its own matrix unless tie_word_embeddings says otherwise.
"""

from __future__ import annotations

from .hf_config_readers import rope
from .hf_table import (
    Allowed,
    Config,
    Derived,
    Divisible,
    Flag,
    Float,
    Heads,
    Hyper,
    Ignore,
    Int,
    Table,
    Tensor,
    Tie,
    TokenId,
    Transpose,
    config_flag,
    config_unset,
    head_size,
)

LAYER = "layers.{l}."
TIED = config_flag("tie_word_embeddings")


def partial_rope(config: Config, hyper: Hyper, refusals: list[str]) -> Hyper:
    """RoPE's base and scaling (hf_config_readers.rope, with the older rotary_emb_base for rope_theta), and r."""
    params = config.get("rope_parameters")
    params = params if isinstance(params, dict) else {}
    if "rope_theta" not in config and "rope_theta" not in params and "rotary_emb_base" in config:
        config = {**config, "rope_theta": config["rotary_emb_base"]}
    out = rope(config, hyper, refusals)
    pct = params.get("partial_rotary_factor", config.get("partial_rotary_factor", config.get("rotary_pct", 0.25)))
    d = int(hyper["d_e"]) // int(hyper["H"])
    if isinstance(pct, bool) or not isinstance(pct, int | float) or not 0 < pct < 1:
        refusals.append(f"rotary_pct = {pct!r}: gpt_neox.alg rotates a part 0 < rotary_pct < 1 of each head")
        return out
    r = int(d * pct)  # as HF rounds it
    if r < 2 or r % 2:
        refusals.append(f"rotary_pct = {pct!r} rotates {r} of a head's {d} coordinates: RoPE rotates pairs")
        return out
    return {**out, "r": r}


TABLE = Table(
    model_types=("gpt_neox",),
    label="GPT-NeoX",
    kind="gpt_neox",
    prefix="gpt_neox.",
    algorithms=("GPTNeoX",),
    config=(
        Int("d_e", "hidden_size", 6144),
        Int("H", "num_attention_heads", 64),
        Int("L", "num_hidden_layers", 44),
        Int("d_mlp", "intermediate_size", 24576),
        Int("N_V", "vocab_size", 50432),
        Float("eps", "layer_norm_eps", 1e-5),
        Int("ell_max", "max_position_embeddings", 2048),
        partial_rope,
        Derived("d_attn", head_size),
        TokenId("bos_token", "bos_token_id"),
        TokenId("eos_token", "eos_token_id"),
    ),
    refusals=(
        Divisible("d_e", "H"),
        Allowed("hidden_act", "gelu", ("gelu",), "gpt_neox.alg's MLP uses the exact (erf) GELU ('gelu')"),
        Flag("use_parallel_residual", True, "gpt_neox.alg adds attention and the MLP to the same input "
             "(the parallel residual); the sequential block is not written"),
        Flag("attention_bias", True, "gpt_neox.alg's attention projections have biases"),
    ),
    tensors=(
        Tensor("embed_in.weight", "W_e", 2, (Transpose(),)),
        # embed_out on disk; transformers 5 calls it lm_head in memory, and a save of its state dict may too
        Tensor("{u:embed_out|lm_head}.weight", "W_u", 2, when=config_unset("tie_word_embeddings")),
        Tie(sources=("embed_in.weight",), copies=("embed_out.weight", "lm_head.weight"), ours="W_u", when=TIED,
            message="shape {shape}, not equal to embed_in.weight, although config.json says "
                    "tie_word_embeddings = true"),
        Tensor("final_layer_norm.weight", "gamma", 1),
        Tensor("final_layer_norm.bias", "beta", 1),
        Tensor(LAYER + "input_layernorm.weight", LAYER + "gamma_1", 1),
        Tensor(LAYER + "input_layernorm.bias", LAYER + "beta_1", 1),
        Tensor(LAYER + "post_attention_layernorm.weight", LAYER + "gamma_2", 1),
        Tensor(LAYER + "post_attention_layernorm.bias", LAYER + "beta_2", 1),
        Tensor(LAYER + "attention.query_key_value.weight", LAYER + "W.heads.{h}.W_{part}", 2,
               heads=Heads("H", 0, ("q", "k", "v"), interleaved=True)),
        Tensor(LAYER + "attention.query_key_value.bias", LAYER + "W.heads.{h}.b_{part}", 1,
               heads=Heads("H", 0, ("q", "k", "v"), interleaved=True)),
        Tensor(LAYER + "attention.dense.weight", LAYER + "W.W_o", 2),
        Tensor(LAYER + "attention.dense.bias", LAYER + "W.b_o", 1),
        Tensor(LAYER + "mlp.dense_h_to_4h.weight", LAYER + "W_mlp1", 2),
        Tensor(LAYER + "mlp.dense_h_to_4h.bias", LAYER + "b_mlp1", 1),
        Tensor(LAYER + "mlp.dense_4h_to_h.weight", LAYER + "W_mlp2", 2),
        Tensor(LAYER + "mlp.dense_4h_to_h.bias", LAYER + "b_mlp2", 1),
        # Buffers older transformers versions saved with the weights: the causal mask and the frequencies.
        Ignore(LAYER + "attention.{b:bias|masked_bias|rotary_emb.inv_freq}"),
        Ignore("rotary_emb.inv_freq"),
    ),
)
