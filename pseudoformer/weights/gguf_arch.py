"""GGUF architectures as HuggingFace checkpoints: metadata keys → config.json fields, tensor names → HF names.

A GGUF file of a family we load from HF is read as that HF checkpoint would be: its metadata becomes
the config.json HF would have written (then hf_engine reads our hyperparameters from it and refuses
what the .alg does not compute, as for a directory), and its tensors are renamed to HF's names (then
the family's table cuts heads, transposes and ties them). So a family is one Arch entry here: which HF
model_type it is, which keys it has, how llama.cpp's converter renamed and changed its tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# {arch}.KEY → the HF config field, and whether it is an integer or a float. Every family has these.
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
# Keys that must be present (the others have HF's defaults, or are derived).
REQUIRED = ("block_count", "embedding_length", "attention.head_count", "feed_forward_length")

# llama.cpp's tensor names (llama.cpp/gguf-py/gguf/tensor_mapping.py) → HF's LlamaForCausalLM names.
LLAMA_TENSORS: tuple[tuple[str, str], ...] = (
    ("token_embd.weight", "model.embed_tokens.weight"),
    ("output_norm.weight", "model.norm.weight"),
    ("output.weight", "lm_head.weight"),
    ("blk.{l}.attn_norm.weight", "model.layers.{l}.input_layernorm.weight"),
    ("blk.{l}.attn_q.{p}", "model.layers.{l}.self_attn.q_proj.{p}"),
    ("blk.{l}.attn_k.{p}", "model.layers.{l}.self_attn.k_proj.{p}"),
    ("blk.{l}.attn_v.{p}", "model.layers.{l}.self_attn.v_proj.{p}"),
    ("blk.{l}.attn_output.weight", "model.layers.{l}.self_attn.o_proj.weight"),
    ("blk.{l}.ffn_norm.weight", "model.layers.{l}.post_attention_layernorm.weight"),
    ("blk.{l}.ffn_gate.weight", "model.layers.{l}.mlp.gate_proj.weight"),
    ("blk.{l}.ffn_down.weight", "model.layers.{l}.mlp.down_proj.weight"),
    ("blk.{l}.ffn_up.weight", "model.layers.{l}.mlp.up_proj.weight"),
)

GEMMA3_TENSORS: tuple[tuple[str, str], ...] = (
    *(t for t in LLAMA_TENSORS if t[0] not in ("blk.{l}.ffn_norm.weight", "output.weight")),
    ("blk.{l}.attn_q_norm.weight", "model.layers.{l}.self_attn.q_norm.weight"),
    ("blk.{l}.attn_k_norm.weight", "model.layers.{l}.self_attn.k_norm.weight"),
    ("blk.{l}.post_attention_norm.weight", "model.layers.{l}.post_attention_layernorm.weight"),
    ("blk.{l}.ffn_norm.weight", "model.layers.{l}.pre_feedforward_layernorm.weight"),
    ("blk.{l}.post_ffw_norm.weight", "model.layers.{l}.post_feedforward_layernorm.weight"),
)


@dataclass(frozen=True)
class Arch:
    """One GGUF ``general.architecture``."""

    name: str  # the metadata keys' prefix
    model_type: str  # the HF model_type (a family table of hf_checkpoint)
    tensors: tuple[tuple[str, str], ...] = LLAMA_TENSORS
    keys: tuple[tuple[str, str, type], ...] = COMMON_KEYS
    # llama.cpp's LlamaModel.permute: q_proj's and k_proj's rows reordered from HF's "rotate half"
    # pairing (i, i + d/2) to the interleaved one (2i, 2i + 1) of Meta's checkpoints; undone on reading.
    permuted_qk: bool = False
    # HF config fields llama.cpp does not record, as the HF family's config has them.
    fixed: dict[str, object] = field(default_factory=dict)
    # Gemma's norms compute x·(1 + γ) and llama.cpp stores 1 + γ: this is subtracted from each *norm.weight.
    norm_shift: float = 0.0


ARCHES: dict[str, Arch] = {a.name: a for a in (
    Arch("llama", "llama", permuted_qk=True),
    # llama.cpp writes Mistral as "llama" (its converter's MistralModel is a LlamaModel); files that say
    # "mistral" exist too. The sliding window, when the file has one, is attention.sliding_window.
    Arch("mistral", "mistral", permuted_qk=True,
         keys=(*COMMON_KEYS, ("attention.sliding_window", "sliding_window", int))),
    # Qwen2 uses HF's pairing in llama.cpp too (NEOX rope): nothing permuted.
    Arch("qwen2", "qwen2"),
    # Gemma 3 (text): q/k norms and norms after attention and the MLP; llama.cpp adds 1 to every norm weight.
    # Checked against transformers on a real Q4_K_M file (tests/weights/test_gguf_real_file.py).
    Arch("gemma3", "gemma3_text", tensors=GEMMA3_TENSORS, norm_shift=1.0,
         keys=(*COMMON_KEYS, ("attention.sliding_window", "sliding_window", int))),
)}
