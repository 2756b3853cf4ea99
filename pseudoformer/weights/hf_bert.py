"""HuggingFace BERT checkpoints -> our parameter names and hyperparameters.

nn.Linear already stores its weight [out, in], the paper's layout, so nothing is transposed except
the embedding tables (stored [vocab, d_e], ours [d_e, vocab]). The query/key/value projections
are split into heads along their output rows.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

import numpy as np

from .errors import WeightsError, fmt_shape
from .hf_common import (
    Collector,
    Handler,
    apply_rules,
    check_ndim,
    config_float,
    config_int,
    split_heads,
    strip_prefix,
)

PREFIX = "bert."
# Our names for the MLM head; the encoder-only entry expects none of them.
HEAD = frozenset({"W_f", "b_f", "gamma", "beta", "b_u"})

IGNORED = tuple(
    re.compile(p)
    for p in (
        r"pooler\..*",  # the [CLS] pooler feeds NSP / classification, not MLM
        r"embeddings\.(position_ids|token_type_ids)",  # index buffers, not parameters
        r"cls\.seq_relationship\..*",  # next-sentence-prediction head
    )
)
# When the head is unused, every head tensor is a known HF tensor that we simply do not need.
HEAD_TENSORS = re.compile(r"cls\.predictions\..*")

# Old TF-converted checkpoints (bert-base-uncased among them) spell LayerNorm parameters gamma/beta.
_LN_W = r"LayerNorm\.(?:weight|gamma)"
_LN_B = r"LayerNorm\.(?:bias|beta)"


def hyperparameters(config: Mapping[str, object]) -> dict[str, int | float]:
    """Our hyperparameters from a BERT config.json (absent keys take BertConfig's defaults)."""
    d_e = config_int(config, "hidden_size", 768)
    heads = config_int(config, "num_attention_heads", 12)
    refusals: list[str] = []
    act = config.get("hidden_act", "gelu")
    if act != "gelu":
        refusals.append(f"hidden_act = {act!r}: bert.alg uses the exact (erf) GELU ('gelu')")
    pos = config.get("position_embedding_type", "absolute")
    if pos not in (None, "absolute"):
        refusals.append(f"position_embedding_type = {pos!r}: bert.alg uses learned absolute positions")
    if config.get("is_decoder", False):
        refusals.append("is_decoder = true: bert.alg attends bidirectionally")
    if config.get("add_cross_attention", False):
        refusals.append("add_cross_attention = true: bert.alg is encoder-only, without cross-attention")
    if d_e % heads:
        refusals.append(f"hidden_size = {d_e} is not divisible by num_attention_heads = {heads}")
    if refusals:
        raise WeightsError("config.json describes a BERT variant this model does not implement", refusals)
    d_head = d_e // heads
    return {
        "d_e": d_e,
        "H": heads,
        "L": config_int(config, "num_hidden_layers", 12),
        "ell_max": config_int(config, "max_position_embeddings", 512),
        "N_V": config_int(config, "vocab_size", 30522),
        "d_mlp": config_int(config, "intermediate_size", 3072),
        "eps": config_float(config, "layer_norm_eps", 1e-12),
        "d_attn": d_head,
        "d_mid": d_head,
        "d_f": d_e,
    }


def _put(ours: str, ndim: int, transpose: bool = False) -> Handler:
    def handle(m: re.Match[str], a: np.ndarray, col: Collector) -> None:
        if check_ndim(a, ndim, col):
            col.put(ours.format(*m.groups()), a.T if transpose else a)

    return handle


def _segment_a(m: re.Match[str], a: np.ndarray, col: Collector) -> None:
    # bert.alg models a single segment, so only token type 0's embedding is ever added.
    if check_ndim(a, 2, col):
        col.put("w_s", a[0])


def _qkv(heads: int) -> Handler:
    def handle(m: re.Match[str], a: np.ndarray, col: Collector) -> None:
        layer, which, what = m.groups()
        if not check_ndim(a, 2 if what == "weight" else 1, col):
            return
        part = {"query": "q", "key": "k", "value": "v"}[which]
        kind = "W" if what == "weight" else "b"
        for h, piece in enumerate((split_heads(a, 0, 1, heads, col) or [[]])[0]):
            col.put(f"layers.{layer}.W.heads.{h}.{kind}_{part}", piece)

    return handle


def to_ours(
    tensors: Mapping[str, np.ndarray], config: Mapping[str, object], expected: Collection[str]
) -> Collector:
    """Map a BERT checkpoint's tensors to our names; problems are collected, not raised.

    The MLM head is mapped only if the model expects it: a BertForMaskedLM checkpoint serves the
    encoder-only entry too, and a BertModel checkpoint used with the MLM entry then reports the
    head's names as missing.
    """
    heads = config_int(config, "num_attention_heads", 12)
    head_used = not HEAD.isdisjoint(expected)
    layer = r"encoder\.layer\.(\d+)\."
    table: list[tuple[str, Handler]] = [
        (r"embeddings\.word_embeddings\.weight", _put("W_e", 2, transpose=True)),
        (r"embeddings\.position_embeddings\.weight", _put("W_p", 2, transpose=True)),
        (r"embeddings\.token_type_embeddings\.weight", _segment_a),
        (rf"embeddings\.{_LN_W}", _put("gamma_e", 1)),
        (rf"embeddings\.{_LN_B}", _put("beta_e", 1)),
        (layer + r"attention\.self\.(query|key|value)\.(weight|bias)", _qkv(heads)),
        (layer + r"attention\.output\.dense\.weight", _put("layers.{0}.W.W_o", 2)),
        (layer + r"attention\.output\.dense\.bias", _put("layers.{0}.W.b_o", 1)),
        (layer + rf"attention\.output\.{_LN_W}", _put("layers.{0}.gamma_1", 1)),
        (layer + rf"attention\.output\.{_LN_B}", _put("layers.{0}.beta_1", 1)),
        (layer + r"intermediate\.dense\.weight", _put("layers.{0}.W_mlp1", 2)),
        (layer + r"intermediate\.dense\.bias", _put("layers.{0}.b_mlp1", 1)),
        (layer + r"output\.dense\.weight", _put("layers.{0}.W_mlp2", 2)),
        (layer + r"output\.dense\.bias", _put("layers.{0}.b_mlp2", 1)),
        (layer + rf"output\.{_LN_W}", _put("layers.{0}.gamma_2", 1)),
        (layer + rf"output\.{_LN_B}", _put("layers.{0}.beta_2", 1)),
    ]
    if head_used:
        table += [
            (r"cls\.predictions\.transform\.dense\.weight", _put("W_f", 2)),
            (r"cls\.predictions\.transform\.dense\.bias", _put("b_f", 1)),
            (rf"cls\.predictions\.transform\.{_LN_W}", _put("gamma", 1)),
            (rf"cls\.predictions\.transform\.{_LN_B}", _put("beta", 1)),
            # Both handled in _finish_head: the bias exists under two tied names, the weight is tied.
            (r"cls\.predictions\.(?:decoder\.)?bias", lambda m, a, c: None),
            (r"cls\.predictions\.decoder\.weight", lambda m, a, c: None),
        ]
    ignored = IGNORED if head_used else (*IGNORED, HEAD_TENSORS)
    col = Collector()
    short = strip_prefix(tensors, PREFIX)
    apply_rules(short, [(re.compile(p), h) for p, h in table], ignored, "bert", col)
    if head_used:
        _finish_head(short, col)
    return col


def _finish_head(short: Mapping[str, tuple[str, np.ndarray]], col: Collector) -> None:
    # HF ties cls.predictions.decoder.bias to cls.predictions.bias; saves carry one or both.
    biases = [short[k] for k in ("cls.predictions.bias", "cls.predictions.decoder.bias") if k in short]
    if biases:
        stored, b_u = biases[0]
        col.hf_name = stored
        if len(biases) == 2 and not (b_u.shape == biases[1][1].shape and np.array_equal(b_u, biases[1][1])):
            col.problem(biases[1][0], "untied", f"differs from {stored}, which HF ties it to")
        elif check_ndim(b_u, 1, col):
            col.put("b_u", b_u)
    # bert.alg unembeds with W_e^T, so a decoder weight can only be dropped if it is that matrix.
    if "cls.predictions.decoder.weight" in short:
        stored, dec = short["cls.predictions.decoder.weight"]
        emb = short.get("embeddings.word_embeddings.weight")
        if emb is None or dec.shape != emb[1].shape or not np.array_equal(dec, emb[1]):
            col.problem(
                stored,
                "untied",
                f"shape {fmt_shape(dec.shape)}, not equal to the word embeddings, but the model "
                "unembeds with W_e (tie_word_embeddings = false is not supported)",
            )
    col.hf_name = ""
