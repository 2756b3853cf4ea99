"""HuggingFace BART checkpoints -> bart.alg: the mapping table.

nn.Linear stores its weight [out, in], the paper's layout, so only the embedding tables are
transposed (stored [rows, d_model], ours [d_e, columns]). The query/key/value projections are split
into heads along their output rows. BartLearnedPositionalEmbedding keeps two extra leading rows
(position t, from 0, is row t + 2) that are never read; they are dropped, so column t of our
W^enc_p / W^dec_p is position t. The token embedding is stored once as `shared` and tied to the
encoder's and decoder's embed_tokens and to lm_head; any of those a save carries must equal it.
A BartModel save has no final_logits_bias; as HF does when it loads such a save into
BartForConditionalGeneration, b_u is then zero.
"""

from __future__ import annotations

from .hf_table import (
    Allowed,
    Const,
    Derived,
    Divisible,
    DropRows,
    Fill,
    Flag,
    Heads,
    Int,
    Row,
    Same,
    Table,
    Tensor,
    Tie,
    TokenId,
    Transpose,
    head_size,
)

T = (Transpose(),)
POSITION_OFFSET = 2  # BartLearnedPositionalEmbedding.offset
# nn.LayerNorm's default, which BART uses everywhere; BartConfig has no setting for it.
LAYER_NORM_EPS = 1e-5
POSITIONS = (DropRows(POSITION_OFFSET, f"shape {{shape}}: a BART position table has max_position_embeddings + "
                                       f"{POSITION_OFFSET} rows"), Transpose())


def _attention(side: str, module: str, group: str) -> tuple[Tensor, ...]:
    """One attention's rows: q, k, v cut into heads, the output projection whole."""
    hf, ours = f"{side}.layers.{{l}}.{module}.", f"layers.{{l}}.{group}."
    return (
        Tensor(hf + "{p:q|k|v}_proj.weight", ours + "heads.{h}.W_{p}", 2, heads=Heads("H")),
        Tensor(hf + "{p:q|k|v}_proj.bias", ours + "heads.{h}.b_{p}", 1, heads=Heads("H")),
        Tensor(hf + "out_proj.weight", ours + "W_o", 2),
        Tensor(hf + "out_proj.bias", ours + "b_o", 1),
    )


def _layer(side: str, module: str, weight: str, bias: str, ndim: int) -> tuple[Tensor, ...]:
    hf = f"{side}.layers.{{l}}.{module}."
    return Tensor(hf + "weight", f"layers.{{l}}.{weight}", ndim), Tensor(hf + "bias", f"layers.{{l}}.{bias}", 1)


TABLE = Table(
    model_types=("bart",),
    label="BART",
    kind="bart",
    prefix="model.",
    algorithms=("BART",),
    config=(
        Int("d_e", "d_model", 1024),
        Int("H", "encoder_attention_heads", 16),
        Int("_H_dec", "decoder_attention_heads", 16),
        Int("d_mlp", "encoder_ffn_dim", 4096),
        Int("_d_mlp_dec", "decoder_ffn_dim", 4096),
        Int("L_enc", "encoder_layers", 12),
        Int("L_dec", "decoder_layers", 12),
        Int("ell_max", "max_position_embeddings", 1024),
        Int("N_V", "vocab_size", 50265),
        Const("eps", LAYER_NORM_EPS),
        Derived("d_attn", head_size),
        Derived("d_mid", head_size),
        # Generation tokens (bart.toml lists the same ones).
        TokenId("bos_token", "bos_token_id"),
        TokenId("eos_token", "eos_token_id"),
        TokenId("decoder_start_token", "decoder_start_token_id"),
    ),
    refusals=(
        Allowed("activation_function", "gelu", ("gelu",), "bart.alg uses the exact (erf) GELU ('gelu')"),
        Flag("scale_embedding", False, "bart.alg adds the token embeddings unscaled (no √d_model)"),
        Same("_H_dec", "H", "bart.alg has one H"),
        Same("_d_mlp_dec", "d_mlp", "bart.alg has one d_mlp"),
        Divisible("d_e", "H"),
    ),
    tensors=(
        Tensor("encoder.embed_positions.weight", "W_enc_p", 2, POSITIONS),
        Tensor("decoder.embed_positions.weight", "W_dec_p", 2, POSITIONS),
        Tensor("encoder.layernorm_embedding.weight", "gamma_enc_e", 1),
        Tensor("encoder.layernorm_embedding.bias", "beta_enc_e", 1),
        Tensor("decoder.layernorm_embedding.weight", "gamma_dec_e", 1),
        Tensor("decoder.layernorm_embedding.bias", "beta_dec_e", 1),
        *_attention("encoder", "self_attn", "W_enc"),
        *_layer("encoder", "self_attn_layer_norm", "gamma_1", "beta_1", 1),
        *_layer("encoder", "final_layer_norm", "gamma_2", "beta_2", 1),
        *_layer("encoder", "fc1", "W_mlp1", "b_mlp1", 2),
        *_layer("encoder", "fc2", "W_mlp2", "b_mlp2", 2),
        *_attention("decoder", "self_attn", "W_dec"),
        *_attention("decoder", "encoder_attn", "W_e_d"),
        *_layer("decoder", "self_attn_layer_norm", "gamma_3", "beta_3", 1),
        *_layer("decoder", "encoder_attn_layer_norm", "gamma_4", "beta_4", 1),
        *_layer("decoder", "final_layer_norm", "gamma_5", "beta_5", 1),
        *_layer("decoder", "fc1", "W_mlp3", "b_mlp3", 2),
        *_layer("decoder", "fc2", "W_mlp4", "b_mlp4", 2),
        # A [1, vocab] buffer, broadcast over positions; ours is the vector b_u.
        Tensor("final_logits_bias", "b_u", 2, (Row(0, rows=1, why="expected shape (1, vocab_size), got {shape}"),)),
        Fill("b_u", absent="final_logits_bias"),
        # bart.alg embeds both sequences and unembeds with the one W_e, so a checkpoint whose copies
        # differ (tie_word_embeddings = false) describes a model it does not implement.
        Tie(sources=("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"),
            copies=("lm_head.weight",), ours="W_e", transforms=T,
            message="shape {shape}, not equal to {source}, but the model embeds and unembeds with one W_e "
                    "(tie_word_embeddings = false is not supported)"),
    ),
)
