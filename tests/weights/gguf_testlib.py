"""Writing a HF model (Llama, Mistral, Qwen2/3, Phi-3, GPT-NeoX, Mixtral, Gemma 2/3) as llama.cpp would
(convert_hf_to_gguf.py): gguf's writer, the converter's keys, gguf's tensor names, its row permutations (q/k,
NeoX's query_key_value), Gemma's 1 + γ norms, Mixtral's stacked experts, each matrix in a chosen ggml format
(gguf.quants), and a small vocabulary. HF reads the file back with from_pretrained(dir, gguf_file=…) where it
can, which is the reference."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from gguf import MODEL_ARCH
from gguf import GGMLQuantizationType as Q


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute (convert_hf_to_gguf.py), for q_proj (H heads) and k_proj (H_kv)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# Where each K format keeps its float16 scales in a block of 256 (llama.cpp's ggml-common.h): byte offsets.
K_SCALES = {Q.Q2_K: (80, 82), Q.Q3_K: (108,), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}


def random_blocks(shape: tuple[int, ...], fmt: Q, rng: np.random.Generator) -> np.ndarray:
    """Blocks of a K format with random codes and small random scales: gguf cannot quantize to these (llama.cpp's
    C code does), but a reader only has to dequantize them, which is all these test."""
    rows, width = shape
    _, size = gguf.GGML_QUANT_SIZES[fmt]
    blocks = rng.integers(0, 256, (rows, width // 256, size), dtype=np.uint8)
    for at in K_SCALES[fmt]:
        d = rng.uniform(2e-4, 2e-3, (rows, width // 256)).astype(np.float16)
        blocks[..., at:at + 2] = d[..., None].view(np.uint8)
    return blocks.reshape(rows, -1)


def spm_vocab(n: int) -> tuple[list[str], list[float], list[int]]:
    """A sentencepiece-style vocabulary of n tokens: <unk>, <s>, </s>, then pieces with scores."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"▁t{i}" for i in range(n - 3)]
    scores = [0.0, 0.0, 0.0] + [-float(i) for i in range(n - 3)]
    types = [2, 3, 3] + [1] * (n - 3)
    return tokens, scores, types


# llama.cpp's architecture name of each HF family (Mistral and Mixtral are written as "llama")
FILE_ARCH = {"mistral": "llama", "mixtral": "llama", "gpt_neox": "gptneox"}
GGUF_ARCH = {"llama": MODEL_ARCH.LLAMA, "qwen2": MODEL_ARCH.QWEN2, "qwen3": MODEL_ARCH.QWEN3, "phi3": MODEL_ARCH.PHI3,
             "gptneox": MODEL_ARCH.GPTNEOX, "gemma2": MODEL_ARCH.GEMMA2, "gemma3": MODEL_ARCH.GEMMA3}


def _metadata(w: gguf.GGUFWriter, kind: str, c: Any) -> None:
    """The keys convert_hf_to_gguf.py writes for the family (its set_gguf_parameters)."""
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    rope = getattr(c, "rope_parameters", None) or {}
    if kind == "gpt_neox":  # GPTNeoXModel: no kv heads, no rope base, r = rotary_pct · d
        w.add_rope_dimension_count(int(rope.get("partial_rotary_factor", 0.25) * head_dim))
        w.add_parallel_residual(c.use_parallel_residual)
        w.add_layer_norm_eps(c.layer_norm_eps)
        return
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    rope = rope.get("full_attention", rope)  # Gemma 3: the global layers' (llama.cpp's local base is 10000)
    theta = rope.get("rope_theta") if "rope_theta" in rope else getattr(c, "rope_theta", None)
    if theta is not None and kind != "gemma2":  # Gemma2Model writes no base (llama.cpp's 10000, HF's default)
        w.add_rope_freq_base(float(theta))
    if rope.get("rope_type") == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope["factor"])
    w.add_rope_dimension_count(head_dim)
    if head_dim != c.hidden_size // c.num_attention_heads or kind.startswith("gemma"):
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if kind == "mixtral":
        w.add_expert_count(c.num_local_experts)
        w.add_expert_used_count(c.num_experts_per_tok)
    if kind == "phi3":
        w.add_rope_scaling_orig_ctx_len(c.original_max_position_embeddings)
        w.add_sliding_window(c.sliding_window or 0)
    if kind == "gemma2":
        w.add_attn_logit_softcapping(c.attn_logit_softcapping)
        w.add_final_logit_softcapping(c.final_logit_softcapping)
    if kind in ("gemma2", "gemma3") and getattr(c, "sliding_window", None):
        w.add_sliding_window(c.sliding_window)


def _converted(kind: str, model: torch.nn.Module) -> Iterator[tuple[str, np.ndarray]]:
    """The HF tensors as llama.cpp's converter changes them, under the HF names gguf's TensorNameMap knows."""
    c = model.config
    for hf_name, t in model.state_dict().items():
        a = t.detach().float().numpy()
        if hf_name == "lm_head.weight" and (c.tie_word_embeddings or kind == "gemma2"):
            continue  # the converter drops a tied unembedding, and Gemma 2's always
        if kind in ("llama", "mistral", "mixtral") and hf_name.endswith("q_proj.weight"):
            a = permute(a, c.num_attention_heads)
        if kind in ("llama", "mistral", "mixtral") and hf_name.endswith("k_proj.weight"):
            a = permute(a, c.num_key_value_heads)
        if kind == "gpt_neox" and ".query_key_value." in hf_name:  # GPTNeoXModel: [H, 3, d] → q | k | v
            h = c.num_attention_heads
            a = a.reshape(h, 3, -1, *a.shape[1:]).swapaxes(0, 1).reshape(a.shape)
        if kind.startswith("gemma") and hf_name.endswith("norm.weight"):
            a = a + 1
        if kind == "mixtral" and ".mlp." in hf_name:  # transformers 5 holds the experts fused, gate | up
            moe = hf_name.split(".mlp.")[0] + ".block_sparse_moe."
            if hf_name.endswith("mlp.gate.weight"):
                yield moe + "gate.weight", a
            elif hf_name.endswith("gate_up_proj"):
                gate, up = np.split(a, 2, axis=1)
                yield moe + "experts.w1.weight", gate
                yield moe + "experts.w3.weight", up
            else:
                yield moe + "experts.w2.weight", a
            continue
        yield hf_name, a


def llama3_rope_freqs(rope: dict[str, Any], dim: int) -> np.ndarray:
    """The rope_freqs.weight LlamaModel.generate_extra_tensors writes for HF's llama3 rope_scaling: the factor
    each frequency is divided by (its loop, in numpy)."""
    base, factor = rope.get("rope_theta", 10000.0), rope.get("factor", 8.0)
    low, high = rope.get("low_freq_factor", 1.0), rope.get("high_freq_factor", 4.0)
    old = rope.get("original_max_position_embeddings", 8192)
    out = []
    for freq in 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim)):
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, np.float32)


def write_gguf(path: Path, model: torch.nn.Module, kind: str, formats: Callable[[str, tuple[int, ...]], Q],
               vocab: tuple[Sequence[str], Sequence[float], Sequence[int]] | None = None,
               merges: Sequence[str] | None = None, tokenizer_model: str = "llama", pre: str | None = None,
               rope_freqs: np.ndarray | None = None, extra: dict[str, np.ndarray] | None = None) -> None:
    """``model`` (a HF model of family ``kind``) written as llama.cpp's converter writes it, tensors named by
    gguf's TensorNameMap; ``formats(gguf_name, shape)`` picks each tensor's ggml type (1-d tensors are always
    F32, as llama.cpp keeps them). ``rope_freqs``: that tensor instead of the converter's; ``extra``: more."""
    c = model.config
    arch = FILE_ARCH.get(kind, kind)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{kind}")  # "mistral" in the name tells a Mistral from a Llama (transformers' rule, ours)
    _metadata(w, kind, c)
    tokens, scores, types = vocab or spm_vocab(c.vocab_size)
    w.add_tokenizer_model(tokenizer_model)
    if pre:
        w.add_tokenizer_pre(pre)
    w.add_token_list(list(tokens))
    if scores:
        w.add_token_scores(list(scores))
    w.add_token_types(list(types))
    if merges is not None:
        w.add_token_merges(list(merges))
    w.add_bos_token_id(c.bos_token_id)
    w.add_eos_token_id(c.eos_token_id)
    if getattr(c, "pad_token_id", None) is not None:
        w.add_pad_token_id(c.pad_token_id)
    names = gguf.get_tensor_name_map(GGUF_ARCH[arch], c.num_hidden_layers)
    rope = getattr(c, "rope_parameters", None) or {}
    if rope.get("rope_type") == "llama3" and rope_freqs is None:
        rope_freqs = llama3_rope_freqs(rope, getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads)
    if rope_freqs is not None:
        w.add_tensor("rope_freqs.weight", rope_freqs)
    for name, t in (extra or {}).items():
        w.add_tensor(name, t)
    for hf_name, a in _converted(kind, model):
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None and hf_name == "lm_head.weight":
            name = "output.weight"
        assert name is not None, hf_name
        fmt = formats(name, a.shape) if a.ndim >= 2 else Q.F32
        if fmt == Q.F32:
            w.add_tensor(name, a.astype(np.float32))
        elif fmt == Q.F16:
            w.add_tensor(name, a.astype(np.float16))
        elif fmt in K_SCALES:
            w.add_tensor(name, random_blocks(a.shape, fmt, np.random.default_rng(len(name))), raw_dtype=fmt)
        else:
            w.add_tensor(name, gguf.quants.quantize(a, fmt), raw_dtype=fmt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


CORPUS = ["The quick brown fox jumps over the lazy dog.", "Pack my box with five dozen liquor jugs!",
          "Sphinx of black quartz, judge my vow. 1234 5678 héllo wörld  ünïcode", "it's 2024; we'll see what's next"] * 20


def trained_vocab(kind: str) -> tuple[tuple[list[str], list[float], list[int]], list[str] | None]:
    """A vocabulary learned from CORPUS by `tokenizers`, as a GGUF lists it: ("llama") sentencepiece-style
    pieces with scores, byte-fallback tokens and <unk>, <s>, </s>; ("gpt2") byte-level BPE with its merges."""
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    if kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
            vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<|endoftext|>"]))
        model = json.loads(tok.to_str())["model"]
        tokens = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
        merges = [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]
        return (tokens, [], [3 if t == "<|endoftext|>" else 1 for t in tokens]), merges
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=300))
    pieces = [t for t, _ in sorted(json.loads(tok.to_str())["model"]["vocab"].items(), key=lambda kv: kv[1])]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    return (tokens, scores, [2, 3, 3] + [6] * 256 + [1] * len(pieces)), None
