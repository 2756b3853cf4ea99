"""HuggingFace GPT-2 checkpoints -> our parameter names and hyperparameters.

HF's GPT-2 uses Conv1D layers whose weights are stored [in, out] (y = x W), while the paper writes
y = W x with W in R^{out x in}; so every matrix is transposed here. The fused c_attn projection
holds q|k|v side by side along its output axis, each block split into heads of n_embd / n_head
consecutive columns.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

import numpy as np

from .errors import Problem, WeightsError, fmt_shape
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

PREFIX = "transformer."
# GPT-2's tanh approximation of GELU goes by two names in HF; both are the function gpt2.alg uses.
TANH_GELU = ("gelu_new", "gelu_pytorch_tanh")

IGNORED = (
    # Causal-mask buffers that older transformers versions saved with the weights.
    re.compile(r"h\.\d+\.attn\.(bias|masked_bias)"),
)


def hyperparameters(config: Mapping[str, object]) -> dict[str, int | float]:
    """Our hyperparameters from a GPT-2 config.json (absent keys take GPT2Config's defaults)."""
    d_e = config_int(config, "n_embd", 768)
    heads = config_int(config, "n_head", 12)
    refusals: list[str] = []
    act = config.get("activation_function", "gelu_new")
    if act not in TANH_GELU:
        refusals.append(f"activation_function = {act!r}: gpt2.alg uses the tanh GELU ('gelu_new')")
    if config.get("scale_attn_by_inverse_layer_idx", False):
        refusals.append(
            "scale_attn_by_inverse_layer_idx = true: attention scores are scaled by 1/sqrt(d_attn) only"
        )
    if not config.get("scale_attn_weights", True):
        refusals.append("scale_attn_weights = false: the paper's attention always scales by 1/sqrt(d_attn)")
    if config.get("add_cross_attention", False):
        refusals.append("add_cross_attention = true: gpt2.alg is decoder-only, without cross-attention")
    if d_e % heads:
        refusals.append(f"n_embd = {d_e} is not divisible by n_head = {heads}")
    if refusals:
        raise WeightsError("config.json describes a GPT-2 variant this model does not implement", refusals)
    d_head = d_e // heads
    return {
        "d_e": d_e,
        "H": heads,
        "L": config_int(config, "n_layer", 12),
        "ell_max": config_int(config, "n_positions", 1024),
        "N_V": config_int(config, "vocab_size", 50257),
        "d_mlp": config_int(config, "n_inner", 4 * d_e),
        "eps": config_float(config, "layer_norm_epsilon", 1e-5),
        "d_attn": d_head,
        "d_mid": d_head,
    }


def _transposed(ours: str) -> Handler:
    def handle(m: re.Match[str], a: np.ndarray, col: Collector) -> None:
        if check_ndim(a, 2, col):
            col.put(ours.format(*m.groups()), a.T)

    return handle


def _as_is(ours: str, ndim: int = 1) -> Handler:
    def handle(m: re.Match[str], a: np.ndarray, col: Collector) -> None:
        if check_ndim(a, ndim, col):
            col.put(ours.format(*m.groups()), a)

    return handle


def _c_attn(heads: int) -> Handler:
    def handle(m: re.Match[str], a: np.ndarray, col: Collector) -> None:
        layer, what = m.groups()
        is_weight = what == "weight"
        if not check_ndim(a, 2 if is_weight else 1, col):
            return
        # The output axis is the last one for both the [in, out] weight and the [out] bias.
        blocks = split_heads(a, a.ndim - 1, 3, heads, col)
        for part, row in zip("qkv", blocks, strict=False):
            for h, piece in enumerate(row):
                base = f"layers.{layer}.W.heads.{h}"
                col.put(
                    f"{base}.W_{part}" if is_weight else f"{base}.b_{part}", piece.T if is_weight else piece
                )

    return handle


def to_ours(
    tensors: Mapping[str, np.ndarray], config: Mapping[str, object], expected: Collection[str]
) -> Collector:
    """Map a GPT-2 checkpoint's tensors to our names; problems are collected, not raised."""
    del expected  # every GPT-2 tensor we know is used by the one GPT-2 model
    heads = config_int(config, "n_head", 12)
    col = Collector()
    rules: list[tuple[re.Pattern[str], Handler]] = [
        (re.compile(p), h)
        for p, h in [
            (r"wte\.weight", _transposed("W_e")),
            (r"wpe\.weight", _transposed("W_p")),
            (r"ln_f\.weight", _as_is("gamma")),
            (r"ln_f\.bias", _as_is("beta")),
            (r"h\.(\d+)\.ln_(1|2)\.weight", _as_is("layers.{0}.gamma_{1}")),
            (r"h\.(\d+)\.ln_(1|2)\.bias", _as_is("layers.{0}.beta_{1}")),
            (r"h\.(\d+)\.attn\.c_attn\.(weight|bias)", _c_attn(heads)),
            (r"h\.(\d+)\.attn\.c_proj\.weight", _transposed("layers.{0}.W.W_o")),
            (r"h\.(\d+)\.attn\.c_proj\.bias", _as_is("layers.{0}.W.b_o")),
            (r"h\.(\d+)\.mlp\.c_fc\.weight", _transposed("layers.{0}.W_mlp1")),
            (r"h\.(\d+)\.mlp\.c_fc\.bias", _as_is("layers.{0}.b_mlp1")),
            (r"h\.(\d+)\.mlp\.c_proj\.weight", _transposed("layers.{0}.W_mlp2")),
            (r"h\.(\d+)\.mlp\.c_proj\.bias", _as_is("layers.{0}.b_mlp2")),
            (r"lm_head\.weight", lambda m, a, c: None),  # checked against wte below
        ]
    ]
    short = strip_prefix(tensors, PREFIX)
    apply_rules(short, rules, IGNORED, "gpt2", col)
    _check_tied(short, col)
    return col


def _check_tied(short: Mapping[str, tuple[str, np.ndarray]], col: Collector) -> None:
    """gpt2.alg unembeds with W_e^T; a separate lm_head can only be dropped if it equals wte.

    transformers 5 leaves tied lm_head.weight out of the save entirely; older saves and
    tie_word_embeddings=false models carry it.
    """
    if "lm_head.weight" not in short:
        return
    stored, head = short["lm_head.weight"]
    wte = short.get("wte.weight")
    if wte is not None and head.shape == wte[1].shape and np.array_equal(head, wte[1]):
        return
    col.problems.append(
        Problem(
            stored,
            "untied",
            f"shape {fmt_shape(head.shape)}, not equal to wte.weight, but the model unembeds with W_e "
            "(tie_word_embeddings = false is not supported)",
        )
    )
