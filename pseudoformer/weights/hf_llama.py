"""HuggingFace Llama, Mistral and Qwen2 checkpoints -> our parameter names and hyperparameters.

The three share one layout (LlamaForCausalLM's): nn.Linear weights stored [out, in], the paper's
layout, so only the token embedding is transposed. q_proj's rows are the H query heads one after
another, k_proj's and v_proj's the H_kv key/value heads; each is cut into heads of head_dim rows.
HF converts Meta's checkpoints to the "rotate half" pairing (i, i + d/2) when it imports them, which
is the pairing models/llama.alg's RoPE uses, so no row is permuted here. Qwen2 adds q/k/v biases;
Mistral a sliding window. With tie_word_embeddings the unembedding W_u is the embedding table itself.
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

PREFIX = "model."
MODEL_TYPES = ("llama", "mistral", "qwen2")
# The family of key/value heads in models/llama.alg: `For g ∈ [H_kv]: W^g_k, W^g_v`.
KV_HEADS = "g"
# The rope_scaling types RoPE (models/variants.alg) computes. It is written as Llama 3's ("llama3"):
# frequencies in bands against the pre-training context ℓ_0; "linear" is its case ℓ_0 = 0, where every
# frequency is divided by κ, and "default" that with κ = 1.
ROPE_TYPES = ("default", "linear", "llama3")
# RoPE's band hyperparameters when the checkpoint has no Llama 3 scaling (HF's llama3 defaults for α, β).
NO_BANDS = {"ell_0": 0.0, "alpha": 1.0, "beta": 4.0}
# Generation tokens: HF config key -> our name (llama.toml lists the same ones).
TOKENS = {"bos_token_id": "bos_token", "eos_token_id": "eos_token"}
IGNORED = (
    # The rotary frequencies, a buffer that older transformers versions saved with the weights.
    re.compile(r"layers\.\d+\.self_attn\.rotary_emb\.inv_freq"),
    re.compile(r"rotary_emb\.inv_freq"),
)


def _rope(config: Mapping[str, object], refusals: list[str]) -> dict[str, float]:
    """b (rope_theta) and the scaling of the frequencies, from transformers 5's rope_parameters or the
    older rope_theta + rope_scaling; a scaling the model does not compute is a refusal naming it."""
    params = config.get("rope_parameters")
    if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
        kinds = {str(k): v for k, v in params.items()}  # per layer type: honoured only if all agree
        if len({repr(sorted(v.items())) for v in kinds.values()}) > 1:
            refusals.append(f"rope_parameters differ between layer types {sorted(kinds)}: llama.alg has one RoPE")
        params = next(iter(kinds.values()))
    if isinstance(params, dict):
        theta = params.get("rope_theta", config.get("rope_theta", 10000.0))
        scaling: object = params
    else:
        theta = config.get("rope_theta", 10000.0)
        scaling = config.get("rope_scaling")
    out: dict[str, float] = {"b": config_float({"rope_theta": theta}, "rope_theta", 10000.0), "kappa": 1.0,
                             **NO_BANDS}
    if scaling is None:
        return out
    if not isinstance(scaling, dict):
        refusals.append(f"rope_scaling = {scaling!r} is not an object")
        return out
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in ROPE_TYPES:
        refusals.append(f"rope_scaling type {kind!r}: llama.alg computes RoPE for {', '.join(ROPE_TYPES)} only")
        return out
    if kind == "default":
        return out
    factor = scaling.get("factor")
    if not _number(factor) or not factor >= 1:
        refusals.append(f"rope_scaling factor = {factor!r} is not a number ≥ 1")
        return out
    out["kappa"] = float(factor)
    if kind == "llama3":
        out.update(_llama3_bands(scaling, refusals))
    return out


def _number(v: object) -> bool:
    return not isinstance(v, bool) and isinstance(v, int | float)


def _llama3_bands(scaling: Mapping[str, object], refusals: list[str]) -> dict[str, float]:
    """ℓ_0, α, β of Llama 3's scaling: original_max_position_embeddings, low_freq_factor, high_freq_factor."""
    keys = {"ell_0": "original_max_position_embeddings", "alpha": "low_freq_factor", "beta": "high_freq_factor"}
    missing = [key for key in keys.values() if key not in scaling]
    if missing:
        refusals.append(f"rope_scaling type 'llama3' needs {', '.join(missing)}")
        return {}
    bands = {ours: scaling[key] for ours, key in keys.items()}
    bad = [f"{keys[k]} = {v!r}" for k, v in bands.items() if not _number(v) or not v > 0]
    if bad:
        refusals.append(f"rope_scaling {', '.join(bad)}: each must be a positive number")
        return {}
    out = {k: float(v) for k, v in bands.items()}  # type: ignore[arg-type]
    if not out["beta"] > out["alpha"]:
        refusals.append(f"rope_scaling high_freq_factor = {out['beta']} must exceed low_freq_factor = "
                        f"{out['alpha']}: the band between them would be empty")
        return {}
    return out


def _window(config: Mapping[str, object], model_type: str, layers: int, refusals: list[str]) -> int | None:
    """Mistral's sliding window w (None: every key is seen); Qwen2's windowed layers are refused."""
    types = config.get("layer_types")
    if isinstance(types, list) and any(t != "full_attention" for t in types) and model_type != "mistral":
        refusals.append(f"layer_types = {sorted(set(map(str, types)))}: {model_type} layers here all attend "
                        "to every earlier position ('full_attention')")
    if model_type == "qwen2":
        if config.get("use_sliding_window", False) and config_int(config, "max_window_layers", layers) < layers:
            refusals.append("use_sliding_window = true: qwen2.alg attends to every earlier position")
        return None
    if model_type != "mistral":
        return None
    w = config.get("sliding_window")
    if w is None:
        return None
    if isinstance(w, bool) or not isinstance(w, int) or w < 1:
        refusals.append(f"sliding_window = {w!r} is not a positive integer")
        return None
    return w


def hyperparameters(config: Mapping[str, object]) -> dict[str, int | float]:
    """Our hyperparameters from a Llama, Mistral or Qwen2 config.json (absent keys take HF's defaults).

    Raises WeightsError naming every setting the model sources do not implement: loading such weights
    would compute something else without complaint.
    """
    model_type = str(config.get("model_type"))
    d_e = config_int(config, "hidden_size", 4096)
    heads = config_int(config, "num_attention_heads", 32)
    kv_heads = config_int(config, "num_key_value_heads", heads)
    layers = config_int(config, "num_hidden_layers", 32)
    refusals: list[str] = []
    if d_e % heads and config.get("head_dim") is None:
        refusals.append(f"hidden_size = {d_e} is not divisible by num_attention_heads = {heads}")
    head_dim = config_int(config, "head_dim", d_e // heads or 1)
    if heads % kv_heads:
        refusals.append(f"num_attention_heads = {heads} is not a multiple of num_key_value_heads = {kv_heads}")
    if head_dim % 2:
        refusals.append(f"head_dim = {head_dim} is odd: RoPE rotates pairs of coordinates")
    act = config.get("hidden_act", "silu")
    if act != "silu":
        refusals.append(f"hidden_act = {act!r}: the MLP is SwiGLU, with SiLU ('silu')")
    if model_type == "llama":
        for key in ("attention_bias", "mlp_bias"):
            if config.get(key, False):
                refusals.append(f"{key} = true: llama.alg's projections have no biases")
    partial = config.get("partial_rotary_factor", 1.0)
    if partial not in (1, 1.0, None):
        refusals.append(f"partial_rotary_factor = {partial!r}: RoPE rotates every coordinate of a head")
    rope = _rope(config, refusals)
    window = _window(config, model_type, layers, refusals)
    if refusals:
        raise WeightsError(f"config.json describes a {model_type} variant this model does not implement", refusals)
    ell_max = config_int(config, "max_position_embeddings", 2048)
    out: dict[str, int | float] = {
        "d_e": d_e,
        "H": heads,
        "H_kv": kv_heads,
        "d_attn": head_dim,
        "L": layers,
        "d_mlp": config_int(config, "intermediate_size", 11008),
        "N_V": config_int(config, "vocab_size", 32000),
        "eps": config_float(config, "rms_norm_eps", 1e-6),
        "ell_max": ell_max,
        **rope,
    }
    if model_type == "mistral":
        out["w"] = window if window is not None else ell_max  # no window: every key up to ℓ_max is seen
    for key, ours in TOKENS.items():
        token = config.get(key)
        if isinstance(token, list) and token:  # Llama 3 lists several end tokens; generation stops at one
            token = token[0]
        if isinstance(token, int) and not isinstance(token, bool) and token >= 0:
            out[ours] = token
    return out


def _put(ours: str, ndim: int) -> Handler:
    def handle(m: re.Match[str], a: np.ndarray, col: Collector) -> None:
        if check_ndim(a, ndim, col):
            col.put(ours.format(*m.groups()), a)

    return handle


def _heads(kind: str, count: int) -> Handler:
    """q_proj/k_proj/v_proj (weight or bias) cut into heads along its output rows."""
    family = "heads" if kind == "q" else KV_HEADS

    def handle(m: re.Match[str], a: np.ndarray, col: Collector) -> None:
        layer, what = m.groups()
        if not check_ndim(a, 2 if what == "weight" else 1, col):
            return
        for h, piece in enumerate((split_heads(a, 0, 1, count, col) or [[]])[0]):
            col.put(f"layers.{layer}.W.{family}.{h}.{'W' if what == 'weight' else 'b'}_{kind}", piece)

    return handle


def to_ours(
    tensors: Mapping[str, np.ndarray], config: Mapping[str, object], expected: Collection[str]
) -> Collector:
    """Map a Llama-family checkpoint's tensors to our names; problems are collected, not raised."""
    del expected  # every tensor of the family maps to one name of llama.alg or its variants
    heads = config_int(config, "num_attention_heads", 32)
    kv_heads = config_int(config, "num_key_value_heads", heads)
    layer = r"layers\.(\d+)\."
    rules: list[tuple[re.Pattern[str], Handler]] = [
        (re.compile(p), h)
        for p, h in [
            (r"embed_tokens\.weight", lambda m, a, c: None),  # handled in _embeddings
            (r"lm_head\.weight", lambda m, a, c: None),
            (r"norm\.weight", _put("gamma", 1)),
            (layer + r"self_attn\.q_proj\.(weight|bias)", _heads("q", heads)),
            (layer + r"self_attn\.k_proj\.(weight|bias)", _heads("k", kv_heads)),
            (layer + r"self_attn\.v_proj\.(weight|bias)", _heads("v", kv_heads)),
            (layer + r"self_attn\.o_proj\.weight", _put("layers.{0}.W.W_o", 2)),
            (layer + r"input_layernorm\.weight", _put("layers.{0}.gamma_1", 1)),
            (layer + r"post_attention_layernorm\.weight", _put("layers.{0}.gamma_2", 1)),
            (layer + r"mlp\.gate_proj\.weight", _put("layers.{0}.W_1", 2)),
            (layer + r"mlp\.down_proj\.weight", _put("layers.{0}.W_2", 2)),
            (layer + r"mlp\.up_proj\.weight", _put("layers.{0}.W_3", 2)),
        ]
    ]
    col = Collector()
    short = strip_prefix(tensors, PREFIX)
    apply_rules(short, rules, IGNORED, str(config.get("model_type")), col)
    _embeddings(short, bool(config.get("tie_word_embeddings", False)), col)
    return col


def _embeddings(short: Mapping[str, tuple[str, np.ndarray]], tied: bool, col: Collector) -> None:
    """W_e from embed_tokens; W_u from lm_head, or, tied, from embed_tokens too (a save may still carry a
    copy of it as lm_head, which must then equal it)."""
    emb = short.get("embed_tokens.weight")
    head = short.get("lm_head.weight")
    if emb is not None:
        col.hf_name = emb[0]
        if check_ndim(emb[1], 2, col):
            col.put("W_e", emb[1].T)
            if tied:
                col.put("W_u", emb[1])
    if head is not None:
        col.hf_name = head[0]
        if not tied:
            if check_ndim(head[1], 2, col):
                col.put("W_u", head[1])
        elif emb is not None and (head[1].shape != emb[1].shape or not np.array_equal(head[1], emb[1])):
            col.problem(head[0], "untied", f"shape {fmt_shape(head[1].shape)}, not equal to embed_tokens.weight, "
                        "although config.json says tie_word_embeddings = true")
    col.hf_name = ""

