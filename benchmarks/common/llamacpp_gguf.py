"""A HF Llama or Qwen2 checkpoint (scale_checkpoints.py's random ones) written as a GGUF file for llama.cpp.

llama.cpp's own converter (convert_hf_to_gguf.py, 0.3.36's) refuses these checkpoints: it imports
sentencepiece (not ours to install), and past that it identifies a BPE tokenizer by the hash of a test
string's tokens ("BPE pre-tokenizer was not recognized"), scale_checkpoints' 256-word one being none it knows. The benchmark
feeds llama.cpp token ids, so the file is written here with gguf's writer, as the converter writes the model's
tensors and keys (tests/weights/gguf_testlib.py does the same for a torch model), and with no vocabulary:
tokenizer.ggml.model "none" and {arch}.vocab_size, for which llama.cpp makes that many dummy tokens.

Matrices are written as BF16 (the checkpoint's own values: bfloat16 widened to float32 by our reader is
exact, so gguf's BF16 rounding gives back the same bits), 1-d tensors as F32 as the converter keeps them. One
tensor is held at a time. llama.cpp's llama_model_quantize (llamacpp_timing.py) makes the Q4_0 file from it.

    python benchmarks/llamacpp_gguf.py CHECKPOINT_DIR OUT.gguf   (the script beside common/)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pseudoformer.weights.safetensors_io import open_safetensors  # noqa: E402

ARCH = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2}


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute (convert_hf_to_gguf.py) of q_proj and k_proj rows: HF's "rotate half"
    pairing (i, i + d/2) of each head to the interleaved pairing (2i, 2i + 1) that llama.cpp's Llama rotates.
    Qwen2 is rotated in HF's pairing by llama.cpp too (NEOX): nothing permuted."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _metadata(w: gguf.GGUFWriter, c: dict[str, Any]) -> None:
    """The keys convert_hf_to_gguf.py's TextModel.set_gguf_parameters writes for a Llama or a Qwen2."""
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    w.add_name(f"random {c['model_type']} (scale_checkpoints.py)")
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_block_count(c["num_hidden_layers"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_rope_freq_base(float(c.get("rope_theta", 10000.0)))
    w.add_rope_dimension_count(head_dim)
    if head_dim != c["hidden_size"] // c["num_attention_heads"]:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_vocab_size(c["vocab_size"])
    w.add_tokenizer_model("none")  # llama.cpp: LLAMA_VOCAB_TYPE_NONE, vocab_size dummy tokens


def convert(checkpoint: Path, out: Path) -> dict[str, Any]:
    """Write `checkpoint` (config.json and model.safetensors) as the GGUF file `out`; return its config."""
    c = json.loads((checkpoint / "config.json").read_text())
    if c["model_type"] not in ARCH:
        raise ValueError(f"{checkpoint}: model_type {c['model_type']!r}; this writes {', '.join(ARCH)}")
    if c.get("rope_scaling"):
        raise ValueError(f"{checkpoint}: rope_scaling is not written here")
    tensors = open_safetensors(checkpoint / "model.safetensors")
    names = gguf.get_tensor_name_map(ARCH[c["model_type"]], c["num_hidden_layers"])
    heads = {"q_proj.weight": c["num_attention_heads"], "k_proj.weight": c["num_key_value_heads"]}

    def gguf_name(hf: str) -> str:
        name = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise ValueError(f"{checkpoint}: gguf has no {c['model_type']} name for {hf}")
        return name

    def data(hf: str) -> np.ndarray:
        a = tensors[hf].load()
        if a.ndim == 1:
            return a.astype(np.float32)
        if c["model_type"] == "llama" and hf.rsplit(".", 2)[-2] + ".weight" in heads:
            a = permute(a, heads[hf.rsplit(".", 2)[-2] + ".weight"])
        return gguf.quants.quantize(a.astype(np.float32), Q.BF16)  # bytes [rows, 2 · cols]

    order = [hf for hf in tensors if not (hf == "lm_head.weight" and c.get("tie_word_embeddings"))]
    w = gguf.GGUFWriter(out, c["model_type"])
    _metadata(w, c)
    for hf in order:  # the shapes and sizes first (the header), then each tensor's bytes in the same order
        shape = tensors[hf].shape
        if len(shape) == 1:
            w.add_tensor_info(gguf_name(hf), shape, np.dtype(np.float32), 4 * shape[0])
        else:
            w.add_tensor_info(gguf_name(hf), (shape[0], 2 * shape[1]), np.dtype(np.uint8), 2 * shape[0] * shape[1],
                              raw_dtype=Q.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for hf in order:
        w.write_tensor_data(data(hf))
    w.close()
    return c


