"""Writing a HF Llama / Mistral / Qwen2 model as llama.cpp would (convert_hf_to_gguf.py): gguf's writer,
llama.cpp's tensor names, its q/k row permutation, each matrix in a chosen ggml format (gguf.quants), and
a small vocabulary. HF reads the file back with from_pretrained(dir, gguf_file=…), which is the reference."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

from pseudoformer.weights.gguf_arch import LLAMA_TENSORS


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute (convert_hf_to_gguf.py), for q_proj (H heads) and k_proj (H_kv)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _gguf_name(hf: str) -> str:
    import re

    for gguf_name, hf_pattern in LLAMA_TENSORS:
        rx = re.escape(hf_pattern).replace(r"\{l\}", r"(?P<l>\d+)").replace(r"\{p\}", r"(?P<p>weight|bias)")
        m = re.fullmatch(rx, hf)
        if m:
            return gguf_name.format(**m.groupdict())
    raise KeyError(hf)


def spm_vocab(n: int) -> tuple[list[str], list[float], list[int]]:
    """A sentencepiece-style vocabulary of n tokens: <unk>, <s>, </s>, then pieces with scores."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"▁t{i}" for i in range(n - 3)]
    scores = [0.0, 0.0, 0.0] + [-float(i) for i in range(n - 3)]
    types = [2, 3, 3] + [1] * (n - 3)
    return tokens, scores, types


def write_gguf(path: Path, model: torch.nn.Module, arch: str, formats: Callable[[str, tuple[int, ...]], Q],
               vocab: tuple[Sequence[str], Sequence[float], Sequence[int]] | None = None,
               merges: Sequence[str] | None = None, tokenizer_model: str = "llama", pre: str | None = None) -> None:
    """``model`` written as llama.cpp's converter writes it; ``formats(gguf_name, shape)`` picks each
    tensor's ggml type (1-d tensors are always F32, as llama.cpp keeps them)."""
    c = model.config
    # llama.cpp writes a Mistral as "llama", named so that readers (transformers, ours) tell it apart.
    w = gguf.GGUFWriter(str(path), "llama" if arch == "mistral" else arch)
    w.add_name(f"tiny-{arch}")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    theta = getattr(c, "rope_theta", None) or c.rope_parameters["rope_theta"]
    w.add_rope_freq_base(float(theta))
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w.add_rope_dimension_count(head_dim)
    if head_dim != c.hidden_size // c.num_attention_heads:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
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
    permuted = arch in ("llama", "mistral")
    for hf_name, t in model.state_dict().items():
        if hf_name == "lm_head.weight" and c.tie_word_embeddings:
            continue
        a = t.detach().float().numpy()
        if permuted and hf_name.endswith("q_proj.weight"):
            a = permute(a, c.num_attention_heads)
        if permuted and hf_name.endswith("k_proj.weight"):
            a = permute(a, c.num_key_value_heads)
        name = _gguf_name(hf_name)
        fmt = formats(name, a.shape) if a.ndim == 2 else Q.F32
        if fmt == Q.F32:
            w.add_tensor(name, a.astype(np.float32))
        elif fmt == Q.F16:
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(a, fmt), raw_dtype=fmt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
