"""HuggingFace BERT checkpoints -> bert.alg: the mapping table.

nn.Linear already stores its weight [out, in], the paper's layout, so nothing is transposed except
the embedding tables (stored [vocab, d_e], ours [d_e, vocab]). The query/key/value projections are
split into heads along their output rows. The MLM head is mapped only if the model expects it: a
BertForMaskedLM checkpoint serves the encoder-only entry too, and a BertModel checkpoint used with
the MLM entry then reports the head's names as missing. bert.alg unembeds with W_eᵀ, so the head's
decoder weight can only be dropped if it is that matrix.
"""

from __future__ import annotations

from .hf_table import (
    Allowed,
    Derived,
    Divisible,
    Flag,
    Float,
    Heads,
    Ignore,
    Int,
    Row,
    Table,
    Tensor,
    Tie,
    Transpose,
    expects_any,
    expects_none,
    head_size,
)

T = (Transpose(),)
# Our names for the MLM head; the encoder-only entry expects none of them.
HEAD = frozenset({"W_f", "b_f", "gamma", "beta", "b_u"})
MLM = expects_any(HEAD)
# Old TF-converted checkpoints (bert-base-uncased among them) spell LayerNorm parameters gamma/beta.
LN_W = "LayerNorm.{_w:weight|gamma}"
LN_B = "LayerNorm.{_b:bias|beta}"
LAYER = "encoder.layer.{l}."

TABLE = Table(
    model_types=("bert",),
    label="BERT",
    kind="bert",
    prefix="bert.",
    algorithms=("BERT", "BERTEncoder"),
    config=(
        Int("d_e", "hidden_size", 768),
        Int("H", "num_attention_heads", 12),
        Int("L", "num_hidden_layers", 12),
        Int("ell_max", "max_position_embeddings", 512),
        Int("N_V", "vocab_size", 30522),
        Int("d_mlp", "intermediate_size", 3072),
        Float("eps", "layer_norm_eps", 1e-12),
        Derived("d_attn", head_size),
        Derived("d_mid", head_size),
        Derived("d_f", lambda h: h["d_e"]),
    ),
    refusals=(
        Allowed("hidden_act", "gelu", ("gelu",), "bert.alg uses the exact (erf) GELU ('gelu')"),
        Allowed("position_embedding_type", "absolute", (None, "absolute"),
                "bert.alg uses learned absolute positions"),
        Flag("is_decoder", False, "bert.alg attends bidirectionally"),
        Flag("add_cross_attention", False, "bert.alg is encoder-only, without cross-attention"),
        Divisible("d_e", "H"),
    ),
    tensors=(
        Tensor("embeddings.word_embeddings.weight", "W_e", 2, T),
        Tensor("embeddings.position_embeddings.weight", "W_p", 2, T),
        # bert.alg models a single segment, so only token type 0's embedding is ever added.
        Tensor("embeddings.token_type_embeddings.weight", "w_s", 2, (Row(0),)),
        Tensor(f"embeddings.{LN_W}", "gamma_e", 1),
        Tensor(f"embeddings.{LN_B}", "beta_e", 1),
        *(Tensor(f"{LAYER}attention.self.{hf}.weight", f"layers.{{l}}.W.heads.{{h}}.W_{q}", 2, (), Heads("H"))
          for hf, q in (("query", "q"), ("key", "k"), ("value", "v"))),
        *(Tensor(f"{LAYER}attention.self.{hf}.bias", f"layers.{{l}}.W.heads.{{h}}.b_{q}", 1, (), Heads("H"))
          for hf, q in (("query", "q"), ("key", "k"), ("value", "v"))),
        Tensor(f"{LAYER}attention.output.dense.weight", "layers.{l}.W.W_o", 2),
        Tensor(f"{LAYER}attention.output.dense.bias", "layers.{l}.W.b_o", 1),
        Tensor(f"{LAYER}attention.output.{LN_W}", "layers.{l}.gamma_1", 1),
        Tensor(f"{LAYER}attention.output.{LN_B}", "layers.{l}.beta_1", 1),
        Tensor(f"{LAYER}intermediate.dense.weight", "layers.{l}.W_mlp1", 2),
        Tensor(f"{LAYER}intermediate.dense.bias", "layers.{l}.b_mlp1", 1),
        Tensor(f"{LAYER}output.dense.weight", "layers.{l}.W_mlp2", 2),
        Tensor(f"{LAYER}output.dense.bias", "layers.{l}.b_mlp2", 1),
        Tensor(f"{LAYER}output.{LN_W}", "layers.{l}.gamma_2", 1),
        Tensor(f"{LAYER}output.{LN_B}", "layers.{l}.beta_2", 1),
        # The MLM head, for the entries that have it.
        Tensor("cls.predictions.transform.dense.weight", "W_f", 2, when=MLM),
        Tensor("cls.predictions.transform.dense.bias", "b_f", 1, when=MLM),
        Tensor(f"cls.predictions.transform.{LN_W}", "gamma", 1, when=MLM),
        Tensor(f"cls.predictions.transform.{LN_B}", "beta", 1, when=MLM),
        # HF ties cls.predictions.decoder.bias to cls.predictions.bias; saves carry one or both.
        Tie(sources=("cls.predictions.bias", "cls.predictions.decoder.bias"), ours="b_u", ndim=1, when=MLM,
            message="differs from {source}, which HF ties it to"),
        Tie(sources=("embeddings.word_embeddings.weight",), copies=("cls.predictions.decoder.weight",), when=MLM,
            message="shape {shape}, not equal to the word embeddings, but the model unembeds with W_e "
                    "(tie_word_embeddings = false is not supported)"),
        Ignore("pooler.{_:*}"),  # the [CLS] pooler feeds NSP / classification, not MLM
        Ignore("embeddings.{_:position_ids|token_type_ids}"),  # index buffers, not parameters
        Ignore("cls.seq_relationship.{_:*}"),  # next-sentence-prediction head
        # Without the MLM head every head tensor is a known HF tensor that the entry does not need.
        Ignore("cls.predictions.{_:*}", when=expects_none(HEAD)),
    ),
)
