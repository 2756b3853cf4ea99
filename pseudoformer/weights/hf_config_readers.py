"""Config readers: the settings a family table cannot say as plain fields, shared by the families that
have them (RoPE's base and scaling, sliding windows). Each is a hf_table.Reader:
(config, hyperparameters so far, refusals) -> more hyperparameters, adding a refusal for what the
model sources do not compute.
"""

from __future__ import annotations

from collections.abc import Mapping

from .config_values import config_bool, config_float, config_int
from .hf_table import Config, Hyper, Reader

# The rope_scaling types RoPE (models/variants.alg) computes. It is written as Llama 3's ("llama3"):
# frequencies in bands against the pre-training context ℓ_0; "linear" is its case ℓ_0 = 0, where every
# frequency is divided by κ, and "default" that with κ = 1.
ROPE_TYPES = ("default", "linear", "llama3")
# RoPE's band hyperparameters when the checkpoint has no Llama 3 scaling (HF's llama3 defaults for α, β).
NO_BANDS = {"ell_0": 0.0, "alpha": 1.0, "beta": 4.0}


def rope(config: Config, hyper: Hyper, refusals: list[str]) -> Hyper:
    """b (rope_theta) and the scaling of the frequencies, from transformers 5's rope_parameters or the
    older rope_theta + rope_scaling; a scaling the model does not compute is a refusal naming it."""
    params = config.get("rope_parameters")
    if params is not None and not isinstance(params, dict):
        refusals.append(f"rope_parameters = {params!r} is not an object")
        return {"b": 10000.0, "kappa": 1.0, **NO_BANDS}
    if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
        kinds = {str(k): v for k, v in params.items()}  # per layer type: honoured only if all agree
        if len({repr(sorted(v.items())) for v in kinds.values()}) > 1:
            refusals.append(f"rope_parameters differ between layer types {sorted(kinds)}: {_source(config)} has one "
                            "RoPE")
        params = next(iter(kinds.values()))
    if isinstance(params, dict):
        theta = params.get("rope_theta", config.get("rope_theta", 10000.0))
        scaling: object = params
    else:
        theta = config.get("rope_theta", 10000.0)
        scaling = config.get("rope_scaling")
    out: Hyper = {"b": config_float({"rope_theta": theta}, "rope_theta", 10000.0), "kappa": 1.0,
                             **NO_BANDS}
    if scaling is None:
        return out
    if not isinstance(scaling, dict):
        refusals.append(f"rope_scaling = {scaling!r} is not an object")
        return out
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in ROPE_TYPES:
        refusals.append(f"rope_scaling type {kind!r}: {_source(config)} computes RoPE for {', '.join(ROPE_TYPES)} only")
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


def _source(config: Config) -> str:
    """The model file a refusal names: each family's is models/<model_type>.alg."""
    return f"{config.get('model_type', 'llama')}.alg"


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


def full_attention_only(config: Config, hyper: Hyper, refusals: list[str]) -> Hyper:
    """Every layer attends to every earlier position: a layer_types with other kinds is refused."""
    types = config.get("layer_types")
    if isinstance(types, list) and any(t != "full_attention" for t in types):
        refusals.append(f"layer_types = {sorted(set(map(str, types)))}: {config.get('model_type')} layers here all "
                        "attend to every earlier position ('full_attention')")
    return {}


def qwen2_no_window(config: Config, hyper: Hyper, refusals: list[str]) -> Hyper:
    """Qwen2's sliding window, which qwen2.alg does not have, is refused where a layer would use it."""
    layers = int(hyper["L"])
    if config_bool(config, "use_sliding_window", False) and config_int(config, "max_window_layers", layers) < layers:
        refusals.append("use_sliding_window = true: qwen2.alg attends to every earlier position")
    return {}


def mistral_window(config: Config, hyper: Hyper, refusals: list[str]) -> Hyper:
    """Mistral's sliding window w; without one every key up to ℓ_max is seen."""
    w = config.get("sliding_window")
    if w is None:
        return {"w": hyper["ell_max"]}
    if isinstance(w, bool) or not isinstance(w, int) or w < 1:
        refusals.append(f"sliding_window = {w!r} is not a positive integer")
        return {}
    return {"w": w}


def layer_pattern(period: int) -> Reader:
    """Sliding-window layers with every P-th layer full (Gemma 2: P = 2, Gemma 3: 6): P and the window w from
    layer_types (else sliding_window_pattern, else `period`); layer types in another pattern are refused."""
    def read(config: Config, hyper: Hyper, refusals: list[str]) -> Hyper:
        layers = int(hyper["L"])
        types = config.get("layer_types")
        if types is None:
            every = config.get("sliding_window_pattern", period)
            if isinstance(every, bool) or not isinstance(every, int) or every < 1:
                refusals.append(f"sliding_window_pattern = {every!r} is not a positive integer")
                return {}
            types = ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(layers)]
        kinds = ("sliding_attention", "full_attention")
        if not isinstance(types, list) or len(types) != layers or any(t not in kinds for t in types):
            refusals.append(f"layer_types = {types!r} is not a list of {layers} of {', '.join(map(repr, kinds))}")
            return {}
        full = [i + 1 for i, t in enumerate(types) if t == "full_attention"]
        p = next((p for p in range(1, layers + 2) if full == list(range(p, layers + 1, p))), None)
        if p is None:
            refusals.append(f"layer_types has full attention in layers {full} (from 1), not in every P-th layer: "
                            "the .alg says which layer is global by l mod P = 0")
            return {}
        w = config.get("sliding_window")
        if len(full) == layers and w is None:
            return {"P": p, "w": hyper["ell_max"]}
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            refusals.append(f"sliding_window = {w!r} is not a positive integer")
            return {}
        return {"P": p, "w": w}
    return read


def gemma3_rope(config: Config, hyper: Hyper, refusals: list[str]) -> Hyper:
    """Gemma 3's two RoPEs: the global layers' base b and its scaling, and the local layers' base b_loc,
    unscaled; from transformers 5's rope_parameters per layer type, or the older rope_theta, rope_scaling
    (the global layers') and rope_local_base_freq."""
    params = config.get("rope_parameters")
    if isinstance(params, dict) and {"full_attention", "sliding_attention"} & set(params):
        full = {"rope_parameters": params.get("full_attention") or {}, "rope_theta": 1_000_000.0}
        local = {"rope_parameters": params.get("sliding_attention") or {}, "rope_theta": 10_000.0}
    else:
        full = {"rope_theta": config.get("rope_theta", 1_000_000.0), "rope_scaling": config.get("rope_scaling")}
        local = {"rope_theta": config.get("rope_local_base_freq", 10_000.0)}
    full["model_type"] = local["model_type"] = "gemma3"  # refusals name gemma3.alg
    out = rope(full, hyper, refusals)
    loc = rope(local, hyper, refusals)
    if any(loc[k] != v for k, v in {"kappa": 1.0, **NO_BANDS}.items()):
        refusals.append("rope_parameters of the sliding_attention layers scale the frequencies: gemma3.alg "
                        "rotates the local layers by the base rope_local_base_freq alone")
    return {**out, "b_loc": loc["b"]}
