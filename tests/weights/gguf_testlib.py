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
