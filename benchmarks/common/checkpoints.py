"""Random bf16 HuggingFace checkpoints at real model shapes, written tensor by tensor.

A 7B checkpoint is 14 GB of bf16: building it as a torch model first (what `save_pretrained` needs)
would hold 28 GB of fp32. This writes the safetensors file directly: the header first (every
tensor's dtype, shape and byte range follow from the config), then each tensor's bytes, drawn a
chunk at a time, so the writer holds one chunk (`CHUNK` values) whatever the model's size.

The weights are N(0, 0.02²) (norm gains 1 + N(0, 0.1²)): nonsense to read, but the sizes, the
layout and the arithmetic are those of the real model, which is what memory and time depend on.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

CHUNK = 1 << 22  # values drawn at a time (16 MB of float32)

_LLAMA = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_act="silu", rms_norm_eps=1e-5,
              attention_bias=False, mlp_bias=False, bos_token_id=1, eos_token_id=2, torch_dtype="bfloat16")

# The shapes of the ladder (their config.json, less what does not change a tensor's shape).
SHAPES: dict[str, dict[str, Any]] = {
    "SmolLM2-135M": {**_LLAMA, "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
                     "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
                     "max_position_embeddings": 8192, "rope_theta": 100000.0, "tie_word_embeddings": True},
    "Qwen2.5-0.5B": {**_LLAMA, "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 151936,
                     "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                     "num_attention_heads": 14, "num_key_value_heads": 2, "max_position_embeddings": 32768,
                     "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
                     "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 21},
    "Qwen2.5-1.5B": {**_LLAMA, "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 151936,
                     "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                     "num_attention_heads": 12, "num_key_value_heads": 2, "max_position_embeddings": 32768,
                     "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
                     "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 21},
    "Llama-3.2-3B": {**_LLAMA, "vocab_size": 128256, "hidden_size": 3072, "intermediate_size": 8192,
                     "num_hidden_layers": 28, "num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 128,
                     "max_position_embeddings": 131072, "rope_theta": 500000.0, "tie_word_embeddings": True,
                     "rope_scaling": {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 8192, "rope_type": "llama3"}},
    "Mistral-7B": {**_LLAMA, "model_type": "mistral", "architectures": ["MistralForCausalLM"], "vocab_size": 32000,
                   "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                   "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 32768,
                   "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": False},
}

# The smallest real shape of each family that onnxruntime-genai's builder also builds (bench_genai_folder.py
# --family); their tensors come from transformers (family_tensor_shapes), not from tensor_shapes below.
FAMILY_SHAPES: dict[str, dict[str, Any]] = {
    "Qwen3-0.6B": {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "vocab_size": 151936,
                   "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
                   "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                   "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
                   "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"},
    "Gemma-3-1B": {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "vocab_size": 262144,
                   "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26,
                   "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
                   "query_pre_attn_scalar": 256, "sliding_window": 512, "sliding_window_pattern": 6,
                   "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "max_position_embeddings": 32768,
                   "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
                   "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "bfloat16"},
    "Gemma-2-2B": {"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "vocab_size": 256000,
                   "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                   "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                   "query_pre_attn_scalar": 256, "sliding_window": 4096, "attn_logit_softcapping": 50.0,
                   "final_logit_softcapping": 30.0, "rope_theta": 10000.0, "max_position_embeddings": 8192,
                   "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
                   "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "bfloat16"},
    "Phi-3-mini": {"model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "vocab_size": 32064,
                   "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
                   "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 4096,
                   "original_max_position_embeddings": 4096, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
                   "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
                   "pad_token_id": 32000, "torch_dtype": "bfloat16"},
}


def family_config(config: dict[str, Any]) -> dict[str, Any]:
    """config.json as transformers writes it for `config` (every default filled in, as a real checkpoint's)."""
    from transformers import AutoConfig

    return AutoConfig.for_model(**config).to_dict()


def family_tensor_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """The tensors of `config`'s HF `…ForCausalLM`, read off the model built on the meta device (no memory)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    if config.get("tie_word_embeddings", False):
        shapes.pop("lm_head.weight", None)  # save_pretrained writes a tied head once, as the embedding
    return shapes


def tensor_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """The checkpoint's tensors, by HF name, in the order HF writes them."""
    d, v, m = config["hidden_size"], config["vocab_size"], config["intermediate_size"]
    h, kv = config["num_attention_heads"], config["num_key_value_heads"]
    hd = config.get("head_dim") or d // h
    bias = config["model_type"] == "qwen2"  # Qwen2's q, k and v projections have biases
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, d)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = (d,)
        for name, rows in (("q", h * hd), ("k", kv * hd), ("v", kv * hd)):
            out[p + f"self_attn.{name}_proj.weight"] = (rows, d)
            if bias:
                out[p + f"self_attn.{name}_proj.bias"] = (rows,)
        out[p + "self_attn.o_proj.weight"] = (d, h * hd)
        out[p + "post_attention_layernorm.weight"] = (d,)
        out[p + "mlp.gate_proj.weight"] = (m, d)
        out[p + "mlp.up_proj.weight"] = (m, d)
        out[p + "mlp.down_proj.weight"] = (d, m)
    out["model.norm.weight"] = (d,)
    if not config.get("tie_word_embeddings", False):
        out["lm_head.weight"] = (v, d)
    return out


def parameter_count(config: dict[str, Any]) -> int:
    return sum(math.prod(s) for s in tensor_shapes(config).values())


def _bf16_chunks(n: int, rng: np.random.Generator, gain: bool) -> Iterator[bytes]:
    import numpy as np

    for start in range(0, n, CHUNK):
        x = rng.standard_normal(min(CHUNK, n - start), dtype=np.float32)
        x = 1.0 + 0.1 * x if gain else 0.02 * x
        # bfloat16 is float32's top half; round to nearest even rather than cut
        bits = x.view(np.uint32)
        bits = bits + (0x7FFF + ((bits >> 16) & 1))
        yield (bits >> 16).astype("<u2").tobytes()


def write_checkpoint(directory: Path, config: dict[str, Any], seed: int = 0) -> int:
    """Write config.json and model.safetensors of a random model of `config`'s shape; return the bytes."""
    import numpy as np

    directory.mkdir(parents=True, exist_ok=True)
    family = config["model_type"] not in ("llama", "qwen2", "mistral")
    (directory / "config.json").write_text(json.dumps(family_config(config) if family else config, indent=1))
    shapes = family_tensor_shapes(config) if family else tensor_shapes(config)
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes.items():
        size = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    rng = np.random.default_rng(seed)
    path = directory / "model.safetensors"
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape in shapes.items():
            for chunk in _bf16_chunks(math.prod(shape), rng, gain="norm" in name):
                f.write(chunk)
    tmp.replace(path)
    return offset


def write_tokenizer(directory: Path) -> None:
    """A word-level tokenizer of 256 ids: onnxruntime-genai's builder will not build a model without one."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(256)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="w1", eos_token="w2").save_pretrained(directory)


def main(argv: list[str]) -> None:
    """python benchmarks/scale_checkpoints.py RUNG DIRECTORY [LAYERS]"""
    rung, where = argv[0], Path(argv[1])
    shape = {**(SHAPES | FAMILY_SHAPES)[rung], **({"num_hidden_layers": int(argv[2])} if len(argv) > 2 else {})}
    print(write_checkpoint(where, shape))
    write_tokenizer(where)
