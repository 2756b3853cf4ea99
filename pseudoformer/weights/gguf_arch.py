"""GGUF architectures as HuggingFace checkpoints: metadata keys → config.json fields, tensor names → HF names.

A GGUF file of a family we load from HF is read as that HF checkpoint would be: its metadata becomes
the config.json HF would have written (then hf_engine reads our hyperparameters from it and refuses
what the .alg does not compute, as for a directory), and its tensors are renamed to HF's names (then
the family's table cuts heads, transposes and ties them). So a family is one Arch entry here: which HF
model_type it is, which keys it has, which HF tensors it holds and how llama.cpp's converter
(convert_hf_to_gguf.py) changed them. The GGUF name of each HF tensor is not written here: it is
gguf's own TensorNameMap (gguf-py/gguf/tensor_mapping.py), the table the converter names tensors by.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any

import numpy as np
from gguf import MODEL_ARCH, get_tensor_name_map

from .errors import WeightsError

# {arch}.KEY → the HF config field, and its kind (int, float or bool). Every llama-like family has these.
COMMON_KEYS: tuple[tuple[str, str, type], ...] = (
    ("context_length", "max_position_embeddings", int),
    ("block_count", "num_hidden_layers", int),
    ("feed_forward_length", "intermediate_size", int),
    ("embedding_length", "hidden_size", int),
    ("attention.head_count", "num_attention_heads", int),
    ("attention.head_count_kv", "num_key_value_heads", int),
    ("attention.key_length", "head_dim", int),
    ("attention.layer_norm_rms_epsilon", "rms_norm_eps", float),
    ("rope.freq_base", "rope_theta", float),
)
WINDOW = ("attention.sliding_window", "sliding_window", int)
# Keys that must be present (the others have HF's defaults, or are derived).
REQUIRED = ("block_count", "embedding_length", "attention.head_count", "feed_forward_length")

# HF tensor names without .weight/.bias, {l} for the layer. An entry (converter's, table's) is a tensor the
# converter names under one HF name and our family table reads under another (Mixtral's stacked experts).
LAYER = "model.layers.{l}."
LLAMA_HF: tuple[str, ...] = (
    "model.embed_tokens", "model.norm", "lm_head", f"{LAYER}input_layernorm", f"{LAYER}self_attn.q_proj",
    f"{LAYER}self_attn.k_proj", f"{LAYER}self_attn.v_proj", f"{LAYER}self_attn.o_proj",
    f"{LAYER}post_attention_layernorm", f"{LAYER}mlp.gate_proj", f"{LAYER}mlp.up_proj", f"{LAYER}mlp.down_proj",
)
QK_NORMS = (f"{LAYER}self_attn.q_norm", f"{LAYER}self_attn.k_norm")
GEMMA_NORMS = (f"{LAYER}pre_feedforward_layernorm", f"{LAYER}post_feedforward_layernorm")
MLP = (f"{LAYER}mlp.gate_proj", f"{LAYER}mlp.up_proj", f"{LAYER}mlp.down_proj")
# Phi-3 keeps HF's packed projections (attn_qkv, and ffn_up holding gate then up); the table cuts them.
PHI3_HF = (*(n for n in LLAMA_HF if ".q_proj" not in n and ".k_proj" not in n and ".v_proj" not in n
             and n not in MLP), f"{LAYER}self_attn.qkv_proj", f"{LAYER}mlp.gate_up_proj", f"{LAYER}mlp.down_proj")
# Mixtral: the converter stacks each layer's experts into one tensor per matrix (ffn_gate_exps [E, d_mlp, d_e],
# ffn_up_exps, ffn_down_exps [E, d_e, d_mlp]), which are the stacks hf_mixtral's rules make of w1, w3, w2.
MIXTRAL_HF = (*(n for n in LLAMA_HF if n not in MLP), f"{LAYER}block_sparse_moe.gate",
              *((f"{LAYER}block_sparse_moe.experts.{w}", f"{LAYER}experts.{w}") for w in ("w1", "w2", "w3")))
NEOX = "gpt_neox.layers.{l}."
NEOX_HF = ("gpt_neox.embed_in", "gpt_neox.final_layer_norm", "embed_out", f"{NEOX}input_layernorm",
           f"{NEOX}post_attention_layernorm", f"{NEOX}attention.query_key_value", f"{NEOX}attention.dense",
           f"{NEOX}mlp.dense_h_to_4h", f"{NEOX}mlp.dense_4h_to_h")


@dataclass(frozen=True)
class Arch:
    """One GGUF ``general.architecture`` (Mixtral: "llama" with experts)."""

    name: str
    model_type: str  # the HF model_type (a family table of hf_checkpoint)
    gguf: MODEL_ARCH  # gguf's architecture, whose TensorNameMap names the tensors
    hf: tuple[str | tuple[str, str], ...] = LLAMA_HF
    keys: tuple[tuple[str, str, type], ...] = COMMON_KEYS
    # How llama.cpp's converter reordered rows (a permutation, so undone on values and on block rows alike):
    # "llama_qk"  LlamaModel.permute of q_proj and k_proj, from HF's "rotate half" pairing (i, i + d/2) to
    #             Meta's interleaved (2i, 2i + 1);
    # "neox_qkv"  GPTNeoXModel.modify_tensors: query_key_value's head-major rows [H, 3, d] regrouped as
    #             q | k | v blocks [3, H, d].
    rows: str | None = None
    # HF config fields llama.cpp does not record, as the HF family's config has them.
    fixed: dict[str, object] = field(default_factory=dict)
    # Gemma's norms compute x·(1 + γ) and llama.cpp stores 1 + γ: this is subtracted from each *norm.weight.
    norm_shift: float = 0.0
    # Gemma: llama.cpp scales the scores by 1/√head_dim, except on the 27B (this many layers), where it is
    # 1/√(d_e/H) (llama-model.cpp's f_attention_scale); the file records neither, so query_pre_attn_scalar is this.
    scale_27b_layers: int | None = None

    @cached_property
    def tensors(self) -> tuple[tuple[str, str], ...]:
        """(GGUF name, HF name) patterns, {l} the layer and {p} weight or bias, from gguf's TensorNameMap."""
        names = get_tensor_name_map(self.gguf, 1)
        out = []
        for entry in self.hf:
            source, ours = entry if isinstance(entry, tuple) else (entry, entry)
            gguf_name = names.get_name(source.format(l=0))
            if gguf_name is None:
                raise KeyError(f"gguf's {self.gguf.name} tensor map has no name for {source}")
            out.append((gguf_name.replace("blk.0.", "blk.{l}.") + ".{p}", ours + ".{p}"))
        return tuple(out)


ARCHES: dict[str, Arch] = {a.name: a for a in (
    Arch("llama", "llama", MODEL_ARCH.LLAMA, rows="llama_qk"),
    # llama.cpp writes Mistral as "llama" (its converter's MistralModel is a LlamaModel); files that say
    # "mistral" exist too. The sliding window, when the file has one, is attention.sliding_window.
    Arch("mistral", "mistral", MODEL_ARCH.LLAMA, rows="llama_qk", keys=(*COMMON_KEYS, WINDOW)),
    # Mixtral is "llama" with {arch}.expert_count: LlamaModel stacks the experts and permutes q and k.
    Arch("mixtral", "mixtral", MODEL_ARCH.LLAMA, MIXTRAL_HF, rows="llama_qk", keys=(
        *COMMON_KEYS, ("expert_count", "num_local_experts", int), ("expert_used_count", "num_experts_per_tok", int))),
    # Qwen2 and Qwen3 use HF's pairing in llama.cpp too (NEOX rope): nothing permuted.
    Arch("qwen2", "qwen2", MODEL_ARCH.QWEN2),
    Arch("qwen3", "qwen3", MODEL_ARCH.QWEN3, (*LLAMA_HF, *QK_NORMS)),
    # Phi-3's window is 0 in the file when the checkpoint has none (Phi-4).
    Arch("phi3", "phi3", MODEL_ARCH.PHI3, PHI3_HF, keys=(
        *COMMON_KEYS, WINDOW, ("rope.scaling.original_context_length", "original_max_position_embeddings", int))),
    # GPT-NeoX: the converter writes no head_count_kv, key_length or rope.freq_base (llama.cpp's defaults:
    # H, d_e/H, 10000) and rope.dimension_count = r; a file without it rotates whole heads (refused by the table).
    Arch("gptneox", "gpt_neox", MODEL_ARCH.GPTNEOX, NEOX_HF, rows="neox_qkv",
         fixed={"hidden_act": "gelu", "partial_rotary_factor": 1.0}, keys=(
             ("context_length", "max_position_embeddings", int), ("block_count", "num_hidden_layers", int),
             ("feed_forward_length", "intermediate_size", int), ("embedding_length", "hidden_size", int),
             ("attention.head_count", "num_attention_heads", int), ("rope.freq_base", "rope_theta", float),
             ("attention.layer_norm_epsilon", "layer_norm_eps", float),
             ("use_parallel_residual", "use_parallel_residual", bool))),
    # Gemma 2 and 3 (text): norms after attention and the MLP (3: q/k norms); llama.cpp adds 1 to every norm
    # weight. Gemma 3 checked against transformers on a real Q4_K_M file (tests/weights/test_gguf_real_file.py).
    Arch("gemma2", "gemma2", MODEL_ARCH.GEMMA2, (*(n for n in LLAMA_HF if n != "lm_head"), *GEMMA_NORMS),
         norm_shift=1.0, scale_27b_layers=46, keys=(
             *COMMON_KEYS, WINDOW, ("attn_logit_softcapping", "attn_logit_softcapping", float),
             ("final_logit_softcapping", "final_logit_softcapping", float))),
    Arch("gemma3", "gemma3_text", MODEL_ARCH.GEMMA3, (*LLAMA_HF, *QK_NORMS, *GEMMA_NORMS), norm_shift=1.0,
         scale_27b_layers=62, keys=(*COMMON_KEYS, WINDOW, ("final_logit_softcapping", "final_logit_softcapping",
                                                           float))),
)}


def row_order(arch: Arch, hf_name: str, config: Mapping[str, Any]) -> Callable[[np.ndarray], np.ndarray] | None:
    """What puts back the rows of this tensor as HF has them (None: they are HF's already)."""
    heads = int(config["num_attention_heads"])
    if arch.rows == "llama_qk" and hf_name.endswith("q_proj.weight"):
        return partial(unpermute_qk, heads=heads)
    if arch.rows == "llama_qk" and hf_name.endswith("k_proj.weight"):
        return partial(unpermute_qk, heads=int(config.get("num_key_value_heads") or heads))
    if arch.rows == "neox_qkv" and ".query_key_value." in hf_name:
        return partial(head_major_qkv, heads=heads)
    return None


def unpermute_qk(rows: np.ndarray, heads: int) -> np.ndarray:
    """Undo LlamaModel.permute: w.reshape(h, 2, r/h/2, …).swapaxes(1, 2) put the halves of each head's
    rows side by side; this puts them back."""
    n = rows.shape[0]
    if heads <= 0 or n % (2 * heads):
        raise WeightsError(f"{n} rows do not split into {heads} heads of pairs, as llama.cpp's permutation needs")
    return rows.reshape(heads, n // heads // 2, 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def head_major_qkv(rows: np.ndarray, heads: int) -> np.ndarray:
    """Undo GPTNeoXModel.modify_tensors: rows [q of every head; k …; v …] back to HF's [H, 3, d] order."""
    n = rows.shape[0]
    if heads <= 0 or n % (3 * heads):
        raise WeightsError(f"{n} rows of query_key_value do not split into 3 × {heads} heads")
    return rows.reshape(3, heads, n // 3 // heads, *rows.shape[1:]).swapaxes(0, 1).reshape(rows.shape)
