"""HuggingFace Phi-3 checkpoints -> phi3.alg: Mistral's table (hf_llama.py) with the packed projections.

Phi3ForCausalLM stores q|k|v as one qkv_proj, rows [H·d; H_kv·d; H_kv·d], and gate|up as one
gate_up_proj, rows [d_mlp; d_mlp] (HF chunks it into gate, then up); both are cut apart into the
names Llama's separate projections have. Its sliding window is Mistral's (none: the whole context).

Refused by name: rope_scaling "longrope" (Phi-3.5, the 128k checkpoints; "su" and "yarn" in older
configs): it rescales each frequency by a short or a long factor list, switched by the sequence length
at run time, and multiplies cos and sin by an attention factor, none of which phi3.alg writes; and a
partial_rotary_factor below 1 (Phi-4-mini), since phi3.alg rotates every coordinate of a head.
"""

from __future__ import annotations

from dataclasses import replace

from .hf_config_readers import rope
from .hf_llama import LAYER, MISTRAL
from .hf_table import Config, Heads, Hyper, Tensor

LONGROPE = ("longrope", "su", "yarn")
# Mistral's rules for the projections Phi-3 packs.
PACKED = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")


def phi3_rope(config: Config, hyper: Hyper, refusals: list[str]) -> Hyper:
    """hf_config_readers.rope, after refusing Phi-3's own scalings by name."""
    params = config.get("rope_parameters")
    scaling = params if isinstance(params, dict) else config.get("rope_scaling")
    scaling = scaling if isinstance(scaling, dict) else {}
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind in LONGROPE:
        refusals.append(f"rope_scaling type {kind!r} (LongRoPE, Phi-3.5 and the 128k checkpoints): its short_factor "
                        "and long_factor per frequency, chosen by the sequence length at run time, and its "
                        "attention factor on cos and sin are not written in phi3.alg")
        return {}
    factor = scaling.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0))
    if factor not in (1, 1.0, None):
        refusals.append(f"partial_rotary_factor = {factor!r}: phi3.alg rotates every coordinate of a head")
    return rope(config, hyper, refusals)


PHI3 = replace(
    MISTRAL,
    model_types=("phi3",),
    label="Phi-3",
    kind="phi3",
    algorithms=("Phi3",),
    config=tuple(phi3_rope if f is rope else f for f in MISTRAL.config),
    refusals=tuple(r for r in MISTRAL.refusals if getattr(r, "key", None) != "partial_rotary_factor"),
    tensors=(
        *(t for t in MISTRAL.tensors if not (isinstance(t, Tensor) and any(f".{p}." in t.hf for p in PACKED))),
        Tensor(f"{LAYER}self_attn.qkv_proj.weight", f"{LAYER}W.{{part}}", 2,
               heads=Heads(("H", "H_kv", "H_kv"), 0, ("heads.{h}.W_q", "g.{h}.W_k", "g.{h}.W_v"))),
        Tensor(f"{LAYER}mlp.gate_up_proj.weight", f"{LAYER}W_{{part}}", 2, heads=Heads(1, 0, ("1", "3"))),
    ),
)
