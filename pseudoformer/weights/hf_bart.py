"""HuggingFace BART checkpoints -> our parameter names and hyperparameters.

nn.Linear stores its weight [out, in], the paper's layout, so only the embedding tables are
transposed (stored [rows, d_model], ours [d_e, columns]). The query/key/value projections are split
into heads along their output rows. BartLearnedPositionalEmbedding keeps two extra leading rows
(position t, from 0, is row t + 2) that are never read; they are dropped, so column t of our
W^enc_p / W^dec_p is position t. The token embedding is stored once as `shared` and tied to the
encoder's and decoder's embed_tokens and to lm_head; any of those a save carries must equal it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

import numpy as np

from .errors import WeightsError, fmt_shape
from .hf_common import Collector, Handler, apply_rules, check_ndim, config_int, split_heads, strip_prefix

PREFIX = "model."
POSITION_OFFSET = 2  # BartLearnedPositionalEmbedding.offset
# nn.LayerNorm's default, which BART uses everywhere; BartConfig has no setting for it.
LAYER_NORM_EPS = 1e-5
# Generation tokens: HF config key -> our name (bart.toml lists the same ones).
TOKENS = {"bos_token_id": "bos_token", "eos_token_id": "eos_token", "decoder_start_token_id": "decoder_start_token"}
# The token embedding and the names HF ties to it, in the order a source for W_e is looked for.
EMBEDDINGS = ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
TIED = (*EMBEDDINGS[1:], "lm_head.weight")


def hyperparameters(config: Mapping[str, object]) -> dict[str, int | float]:
    """Our hyperparameters from a BART config.json (absent keys take BartConfig's defaults)."""
    d_e = config_int(config, "d_model", 1024)
    heads = config_int(config, "encoder_attention_heads", 16)
    d_mlp = config_int(config, "encoder_ffn_dim", 4096)
    refusals: list[str] = []
    act = config.get("activation_function", "gelu")
    if act != "gelu":
        refusals.append(f"activation_function = {act!r}: bart.alg uses the exact (erf) GELU ('gelu')")
    if config.get("scale_embedding", False):
        refusals.append("scale_embedding = true: bart.alg adds the token embeddings unscaled (no √d_model)")
    dec_heads = config_int(config, "decoder_attention_heads", 16)
    if dec_heads != heads:
        refusals.append(
            f"decoder_attention_heads = {dec_heads} differs from encoder_attention_heads = {heads}: "
            "bart.alg has one H"
        )
    dec_mlp = config_int(config, "decoder_ffn_dim", 4096)
    if dec_mlp != d_mlp:
        refusals.append(f"decoder_ffn_dim = {dec_mlp} differs from encoder_ffn_dim = {d_mlp}: bart.alg has one d_mlp")
    if d_e % heads:
        refusals.append(f"d_model = {d_e} is not divisible by encoder_attention_heads = {heads}")
    if refusals:
        raise WeightsError("config.json describes a BART variant this model does not implement", refusals)
    d_head = d_e // heads
    out: dict[str, int | float] = {
        "d_e": d_e,
        "H": heads,
        "L_enc": config_int(config, "encoder_layers", 12),
        "L_dec": config_int(config, "decoder_layers", 12),
        "ell_max": config_int(config, "max_position_embeddings", 1024),
        "N_V": config_int(config, "vocab_size", 50265),
        "d_mlp": d_mlp,
        "eps": LAYER_NORM_EPS,
        "d_attn": d_head,
        "d_mid": d_head,
    }
    for key, ours in TOKENS.items():
        token = config.get(key)
        if isinstance(token, int) and not isinstance(token, bool) and token >= 0:
            out[ours] = token
    return out


def _put(ours: str, ndim: int, transpose: bool = False) -> Handler:
    def handle(m: re.Match[str], a: np.ndarray, col: Collector) -> None:
        if check_ndim(a, ndim, col):
            col.put(ours.format(*m.groups()), a.T if transpose else a)

    return handle


def _positions(ours: str) -> Handler:
    def handle(m: re.Match[str], a: np.ndarray, col: Collector) -> None:
        if not check_ndim(a, 2, col):
            return
        if a.shape[0] <= POSITION_OFFSET:
            col.problem(
                col.hf_name,
                "invalid",
                f"shape {fmt_shape(a.shape)}: a BART position table has max_position_embeddings + "
                f"{POSITION_OFFSET} rows",
            )
            return
        col.put(ours, a[POSITION_OFFSET:].T)

    return handle


def _final_logits_bias(m: re.Match[str], a: np.ndarray, col: Collector) -> None:
    # A [1, vocab] buffer, broadcast over positions; ours is the vector b_u.
    if a.ndim == 2 and a.shape[0] == 1:
        col.put("b_u", a[0])
    else:
        col.problem(col.hf_name, "invalid", f"expected shape (1, vocab_size), got {fmt_shape(a.shape)}")


def _attention(heads: int) -> Handler:
    def handle(m: re.Match[str], a: np.ndarray, col: Collector) -> None:
        side, layer, module, which, what = m.groups()
        group = {"encoder.self_attn": "W_enc", "decoder.self_attn": "W_dec", "decoder.encoder_attn": "W_e_d"}.get(
            f"{side}.{module}"
        )
        if group is None:  # encoder layers have no encoder_attn
            col.problem(col.hf_name, "unknown", f"HF tensor of shape {fmt_shape(a.shape)} that no bart model uses")
            return
        is_weight = what == "weight"
        if not check_ndim(a, 2 if is_weight else 1, col):
            return
        base = f"layers.{layer}.{group}"
        kind = "W" if is_weight else "b"
        if which == "out":
            col.put(f"{base}.{kind}_o", a)
            return
        for h, piece in enumerate((split_heads(a, 0, 1, heads, col) or [[]])[0]):
            col.put(f"{base}.heads.{h}.{kind}_{which}", piece)

    return handle


# Per-layer modules other than attention: (encoder's, decoder's) our names, by HF module.
_LAYER = {
    "self_attn_layer_norm": (("gamma_1", "beta_1"), ("gamma_3", "beta_3")),
    "encoder_attn_layer_norm": (None, ("gamma_4", "beta_4")),
    "final_layer_norm": (("gamma_2", "beta_2"), ("gamma_5", "beta_5")),
    "fc1": (("W_mlp1", "b_mlp1"), ("W_mlp3", "b_mlp3")),
    "fc2": (("W_mlp2", "b_mlp2"), ("W_mlp4", "b_mlp4")),
}


def _layer_module(m: re.Match[str], a: np.ndarray, col: Collector) -> None:
    side, layer, module, what = m.groups()
    names = _LAYER[module][side == "decoder"]
    if names is None:
        col.problem(col.hf_name, "unknown", f"HF tensor of shape {fmt_shape(a.shape)} that no bart model uses")
        return
    is_matrix = module.startswith("fc") and what == "weight"
    if check_ndim(a, 2 if is_matrix else 1, col):
        col.put(f"layers.{layer}.{names[what == 'bias']}", a)


def to_ours(
    tensors: Mapping[str, np.ndarray], config: Mapping[str, object], expected: Collection[str]
) -> Collector:
    """Map a BART checkpoint's tensors to our names; problems are collected, not raised.

    A BartModel save has no final_logits_bias; as HF does when it loads such a save into
    BartForConditionalGeneration, b_u is then zero.
    """
    heads = config_int(config, "encoder_attention_heads", 16)
    layer = r"(encoder|decoder)\.layers\.(\d+)\."
    rules: list[tuple[re.Pattern[str], Handler]] = [
        (re.compile(p), h)
        for p, h in [
            (r"encoder\.embed_positions\.weight", _positions("W_enc_p")),
            (r"decoder\.embed_positions\.weight", _positions("W_dec_p")),
            (r"encoder\.layernorm_embedding\.weight", _put("gamma_enc_e", 1)),
            (r"encoder\.layernorm_embedding\.bias", _put("beta_enc_e", 1)),
            (r"decoder\.layernorm_embedding\.weight", _put("gamma_dec_e", 1)),
            (r"decoder\.layernorm_embedding\.bias", _put("beta_dec_e", 1)),
            (layer + r"(self_attn|encoder_attn)\.(q|k|v|out)_proj\.(weight|bias)", _attention(heads)),
            (layer + r"(self_attn_layer_norm|encoder_attn_layer_norm|final_layer_norm|fc1|fc2)\.(weight|bias)",
             _layer_module),
            (r"final_logits_bias", _final_logits_bias),
            # The token embedding and its tied copies: handled in _embeddings.
            *((re.escape(name), lambda m, a, c: None) for name in (*EMBEDDINGS, "lm_head.weight")),
        ]
    ]
    col = Collector()
    short = strip_prefix(tensors, PREFIX)
    apply_rules(short, rules, (), "bart", col)
    _embeddings(short, col)
    if "final_logits_bias" not in short and "b_u" in expected and "W_e" in col.tensors:
        col.put("b_u", np.zeros(col.tensors["W_e"].shape[1], dtype=col.tensors["W_e"].dtype))
    return col


def _embeddings(short: Mapping[str, tuple[str, np.ndarray]], col: Collector) -> None:
    """W_e from `shared` (or a tied copy if a save left `shared` out); every other copy must equal it.

    bart.alg embeds both sequences and unembeds with the one W_e, so a checkpoint whose copies differ
    (tie_word_embeddings = false) describes a model it does not implement.
    """
    present = [name for name in EMBEDDINGS if name in short]
    if not present:
        return  # fit() reports W_e as missing
    source, emb = short[present[0]]
    col.hf_name = source
    if check_ndim(emb, 2, col):
        col.put("W_e", emb.T)
    for name in TIED:
        if name == present[0] or name not in short:
            continue
        stored, copy = short[name]
        if copy.shape != emb.shape or not np.array_equal(copy, emb):
            col.problem(
                stored,
                "untied",
                f"shape {fmt_shape(copy.shape)}, not equal to {source}, but the model embeds and unembeds "
                "with one W_e (tie_word_embeddings = false is not supported)",
            )
    col.hf_name = ""
