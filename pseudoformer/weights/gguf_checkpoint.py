"""A GGUF file read as a HuggingFace checkpoint: its config.json, its tensors by HF name, and Q4_0/Q8_0 codes.

The metadata becomes the config.json HF would have (gguf_arch), the tensors HF-named TensorRefs that
read, dequantize and un-permute themselves when loaded; hf_engine's plan for the family then maps
them to our names exactly as it maps a checkpoint directory, and a tensor is read only when its turn
comes (the model is never in memory twice). Formats:

  F32, F16, BF16                           read as they are (bfloat16 widened to float32, exactly)
  Q4_0, Q8_0                               dequantized (gguf.quants), and the values carry their blocks
                                           (ir/block_coded.py): the quantize pass keeps those as
                                           MatMulNBits, bit-exact, instead of quantizing again
  Q4_1, Q5_0, Q5_1, Q2_K … Q6_K           dequantized with gguf's numpy code, then float32 weights like
                                           any other (requantized only by --quantize)
  anything else (IQ*, TQ*, MXFP4, …)      refused by name
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from gguf import quants
from gguf.constants import GGMLQuantizationType as Q
from gguf.constants import GGUFValueType

from pseudoformer.ir.block_coded import FORMATS, Codes

from . import hf_engine
from .config_values import MAX_INT, SourcedConfig, float_problem
from .errors import WeightsError
from .gguf_arch import ARCHES, REQUIRED, Arch, row_order
from .gguf_format import FLOAT_TYPES, INT_TYPES, GGUFFile, TensorInfo
from .gguf_rope import llama3_scaling
from .hf_engine import Expected, Plan, Planned
from .tensor_ref import TensorRef

PLAIN = {Q.F32: np.float32, Q.F16: np.float16}
DEQUANTIZED = frozenset({Q.BF16, Q.Q4_0, Q.Q8_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K})
SUPPORTED_FORMATS = ("F32", "F16", "BF16", "Q4_0", "Q8_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K",
                     "Q5_K", "Q6_K")


@cache
def _pattern(gguf_name: str) -> re.Pattern[str]:
    return re.compile(re.escape(gguf_name).replace(r"\{l\}", r"(?P<l>\d+)").replace(r"\{p\}", r"(?P<p>weight|bias)"))


@dataclass
class GGUFCheckpoint:
    file: GGUFFile
    arch: Arch
    config: dict[str, Any]  # as HF's config.json would be
    tensors: dict[str, TensorRef]  # by HF name
    infos: dict[str, TensorInfo]  # the GGUF tensor behind each HF name

    @property
    def path(self) -> Path:
        return self.file.path


def open_gguf(path: str | Path) -> GGUFCheckpoint:
    """Parse the header, check the metadata, and plan each tensor's reading; no tensor data is read."""
    f = GGUFFile(path)
    arch = _arch(f)
    config = _config(f, arch)
    tensors: dict[str, TensorRef] = {}
    infos: dict[str, TensorInfo] = {}
    for name, info in f.tensors.items():
        if name == "rope_freqs.weight":  # Llama 3's scaled frequencies, as factors
            _rope_freqs(f, info, config)
            continue
        if name.startswith("rope_factors_"):
            raise f.error(f"{name} holds LongRoPE's factors (Phi-3's 128k checkpoints, rope_scaling 'longrope'): "
                          "its short and long factors, switched by the sequence length, are not written in "
                          "phi3.alg", at=None)
        hf_name = _hf_name(arch, name)
        shift = arch.norm_shift if hf_name.endswith("norm.weight") else 0.0
        tensors[hf_name] = _ref(f, info, row_order(arch, hf_name, config), shift)
        infos[hf_name] = info
    if "output.weight" not in f.tensors:  # llama.cpp drops output.weight when it is the embedding
        config["tie_word_embeddings"] = True
    return GGUFCheckpoint(f, arch, config, tensors, infos)


def gguf_config(path: str | Path) -> dict[str, Any]:
    """The config.json a HF checkpoint of this GGUF file would have (model_type included)."""
    ckpt = open_gguf(path)
    check_model(ckpt)
    return ckpt.config


def check_model(ckpt: GGUFCheckpoint) -> None:
    from .hf_checkpoint import TABLES  # the family tables; hf_checkpoint imports nothing of ours

    if ckpt.arch.model_type not in TABLES:
        raise WeightsError(f"GGUF file '{ckpt.path}': its {ckpt.arch.name} tensors are read, but no model here "
                           f"takes model_type {ckpt.arch.model_type!r} yet")


def map_gguf(ckpt: GGUFCheckpoint, expected: Expected | Collection[str], *, group: str | None = None) -> Plan:
    """The plan of hf_engine for the file's family, as for a HF directory (problems collected, not raised)."""
    from .hf_checkpoint import TABLES  # the family tables; hf_checkpoint imports nothing of ours

    check_model(ckpt)
    return hf_engine.plan(TABLES[ckpt.arch.model_type], ckpt.tensors, ckpt.config, expected, group=group)


def block_codes(ckpt: GGUFCheckpoint, plan: Plan) -> dict[str, Codes]:
    """{our name: the blocks its values came from}, for each weight the plan makes of a Q4_0 or Q8_0 matrix's
    rows (ir/block_coded.py); none of them read yet."""
    out: dict[str, Codes] = {}
    for name, planned in plan.tensors.items():
        info = ckpt.infos.get(planned.origin)
        if info is None or info.qtype.name not in FORMATS or len(info.shape) != 2:
            continue
        codes = _codes(ckpt, planned, info)
        if codes is not None:
            out[name] = codes
    return out


def _codes(ckpt: GGUFCheckpoint, planned: Planned, info: TensorInfo) -> Codes | None:
    """Which of the matrix's rows our tensor is, found by applying the plan's steps to row numbers."""
    n, k = info.shape
    rows = np.broadcast_to(np.arange(n)[:, None], (n, k))
    for step in planned.steps:
        rows = step(rows)
    if rows.ndim != 2 or k not in rows.shape:
        return None
    if rows.shape[1] == k and rows.strides[1] == 0:
        picked, transposed = np.array(rows[:, 0]), False
    elif rows.shape[0] == k and rows.strides[0] == 0:
        picked, transposed = np.array(rows[0, :]), True
    else:
        return None
    order = row_order(ckpt.arch, planned.origin, ckpt.config)
    f = ckpt.file

    def read() -> np.ndarray:
        raw = f.raw(info).reshape(n, -1)
        blocks = np.ascontiguousarray((order(raw) if order else raw)[picked])
        f.release(info)
        # Kept as blocks, a weight is never dequantized: its scales (each block's first 2 bytes, float16) are
        # checked here, as dequantizing checks them (_dequantize).
        scales = blocks.reshape(blocks.shape[0], -1, FORMATS[info.qtype.name][1])[..., :2].copy().view(np.float16)
        if not np.isfinite(scales).all():
            row = int(np.argwhere(~np.isfinite(scales))[0][0])
            raise f.error(f"tensor {info.name!r} ({info.qtype.name}) dequantizes to a value that is not finite in "
                          f"row {row}: a block's scale is infinite or NaN (a damaged file)", at=None)
        return blocks

    return Codes(info.qtype.name, read, transposed)


# ---- metadata ----------------------------------------------------------------------------------------


def _arch(f: GGUFFile) -> Arch:
    v = f.metadata.get("general.architecture")
    if v is None:
        raise f.error("no general.architecture in the metadata: which model this is is unknown", at=None)
    if v.type != GGUFValueType.STRING:
        raise f.error(f"general.architecture is {v.describe()}, not a STRING", at=None)
    if v.value not in ARCHES:
        raise f.error(f"architecture {v.value!r} is not supported; supported: {', '.join(sorted(ARCHES))}", at=None)
    name = f.metadata.get("general.name")
    if v.value == "llama" and (_number(f, "llama.expert_count", int) or 0) > 0:
        return ARCHES["mixtral"]  # llama.cpp writes Mixtral as "llama" with experts
    if v.value == "llama" and name is not None and "mistral" in str(name.value).lower():
        # llama.cpp writes Mistral as "llama"; its name tells them apart, as transformers' GGUF reader does.
        return ARCHES["mistral"]
    return ARCHES[v.value]


def _number(f: GGUFFile, key: str, kind: type) -> int | float | bool | None:
    v = f.metadata.get(key)
    if v is None:
        return None
    if kind is bool:
        if v.type != GGUFValueType.BOOL:
            raise f.error(f"metadata {key} is {v.describe()}, not a BOOL", at=None)
        return bool(v.value)
    ok = v.type in INT_TYPES if kind is int else v.type in INT_TYPES | FLOAT_TYPES
    if not ok:
        want = "an integer" if kind is int else "a number"
        raise f.error(f"metadata {key} is {v.describe()}, not {want}", at=None)
    value = kind(v.value)
    # The bounds config.json's values have (config_values.py); 0 is a GGUF value's "none" (a window, token 0).
    if kind is int:
        why = "is negative" if value < 0 else f"is past {MAX_INT:,}, the largest size a model here takes" \
            if value > MAX_INT else None
    else:
        why = float_problem(value, positive=False)
    if why is not None:
        raise f.error(f"metadata {key} = {value!r} {why}", at=None)
    return value


def _config(f: GGUFFile, arch: Arch) -> SourcedConfig:
    p = str(f.metadata["general.architecture"].value)  # the keys' prefix: "llama" for a Mistral too
    missing = [f"{p}.{k}" for k in REQUIRED if f"{p}.{k}" not in f.metadata]
    if missing:
        raise f.error(f"metadata lacks {', '.join(missing)}", at=None)
    config = SourcedConfig({"model_type": arch.model_type, "hidden_act": "silu", **arch.fixed}, f"GGUF file {f.path}",
                           {hf_key: f"{p}.{key}" for key, hf_key, _ in arch.keys})
    for key, hf_key, kind in arch.keys:
        value = _number(f, f"{p}.{key}", kind)
        if value is not None and not (hf_key == "sliding_window" and value == 0):  # 0: none (llama.cpp's n_swa)
            config[hf_key] = value
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or (config["hidden_size"] // heads if heads else 0)
    if arch.scale_27b_layers is not None and heads:
        big = config["num_hidden_layers"] == arch.scale_27b_layers
        config["query_pre_attn_scalar"] = config["hidden_size"] // heads if big else head_dim
    rotary = _number(f, f"{p}.rope.dimension_count", int)
    if rotary is not None and head_dim and rotary != head_dim:
        config["partial_rotary_factor"] = rotary / head_dim  # refused by the family table, naming the setting
    scaling = f.metadata.get(f"{p}.rope.scaling.type")
    if scaling is not None and scaling.value not in ("none", None):
        if scaling.type != GGUFValueType.STRING:
            raise f.error(f"metadata {p}.rope.scaling.type is {scaling.describe()}, not a STRING", at=None)
        config["rope_scaling"] = {"rope_type": scaling.value, "factor": _number(f, f"{p}.rope.scaling.factor", float)}
    embedding = f.tensors.get("token_embd.weight")
    tokens = f.metadata.get("tokenizer.ggml.tokens")
    if embedding is not None:
        config["vocab_size"] = embedding.shape[0]
    elif tokens is not None and tokens.item == GGUFValueType.STRING:
        config["vocab_size"] = len(tokens.value)
    for ours, key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id")):
        token = _number(f, f"tokenizer.ggml.{key}", int)
        if token is not None:
            config[ours] = token
    return config


def _rope_freqs(f: GGUFFile, info: TensorInfo, config: dict[str, Any]) -> None:
    """rope_freqs.weight, the factor each RoPE frequency is divided by, as HF's Llama 3 rope_scaling."""
    if info.qtype != Q.F32 or len(info.shape) != 1:
        raise f.error(f"rope_freqs.weight is {info.qtype.name} of shape {list(info.shape)}, not F32 factors", at=None)
    heads = config["num_attention_heads"]
    dim = config.get("head_dim") or (config["hidden_size"] // heads if heads else 0)
    rotary = _number(f, f"{f.metadata['general.architecture'].value}.rope.dimension_count", int)
    scaling = llama3_scaling(f.raw(info).view(np.float32), float(config.get("rope_theta", 10000.0)), rotary or dim)
    if isinstance(scaling, str):
        raise f.error(f"rope_freqs.weight scales RoPE's frequencies, but {scaling}", at=None)
    if scaling and "rope_scaling" in config:
        raise f.error("rope_freqs.weight and rope.scaling.type both scale RoPE's frequencies", at=None)
    if scaling:
        config["rope_scaling"] = scaling


# ---- tensors -----------------------------------------------------------------------------------------


def _hf_name(arch: Arch, name: str) -> str:
    for gguf_name, hf in arch.tensors:
        m = _pattern(gguf_name).fullmatch(name)
        if m:
            return hf.format(**m.groupdict())
    return name  # no HF name: hf_engine reports it as a tensor the model does not use


# Rows dequantized at a time: gguf's code makes a few float32 temporaries the size of its input's values, which
# for a whole 262k-token embedding (Gemma 3) would be gigabytes; 16 MiB of output at a time keeps them small.
_CHUNK = 4 << 20


def _dequantize(f: GGUFFile, raw: np.ndarray, info: TensorInfo) -> np.ndarray:
    rows = int(np.prod(info.shape[:-1], dtype=np.int64))
    blocks = raw.reshape(rows, -1)
    out = np.empty((rows, info.shape[-1]), np.float32)
    step = max(1, _CHUNK // info.shape[-1])
    for start in range(0, rows, step):
        with np.errstate(all="ignore"):  # a non-finite scale is refused just below, by name, not warned of per block
            chunk = quants.dequantize(blocks[start:start + step], info.qtype)
        if not np.isfinite(chunk).all():
            row = start + int(np.argwhere(~np.isfinite(chunk))[0][0])
            raise f.error(f"tensor {info.name!r} ({info.qtype.name}) dequantizes to a value that is not finite in row "
                          f"{row}: a block's scale is infinite or NaN (a damaged file)", at=None)
        out[start:start + step] = chunk
    return out.reshape(info.shape)


def _ref(f: GGUFFile, info: TensorInfo, order: Callable[[np.ndarray], np.ndarray] | None, shift: float = 0.0
         ) -> TensorRef:
    fmt = info.qtype
    if fmt not in PLAIN and fmt not in DEQUANTIZED:
        raise f.error(f"tensor {info.name!r} is {fmt.name}, a format not read here (supported: "
                      f"{', '.join(SUPPORTED_FORMATS)})", at=None)
    dtype = np.dtype(PLAIN.get(fmt, np.float32) if not shift else np.float32)

    def read() -> np.ndarray:
        raw = f.raw(info)
        if fmt in PLAIN:  # a copy: the map is the file's, and the loader keeps what it is given (private)
            values = raw.view(dtype).reshape(info.shape).copy()
        else:
            values = _dequantize(f, raw, info)
        f.release(info)  # copied or dequantized: the map's pages are no longer needed
        if order is not None:  # llama.cpp's row permutation undone
            values = order(values)
        if shift:  # Gemma's norms: llama.cpp stored 1 + γ for HF's γ
            values = values.astype(np.float32) - np.float32(shift)
        return values

    return TensorRef(tuple(info.shape), dtype, read)
