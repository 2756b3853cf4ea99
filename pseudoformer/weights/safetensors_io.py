"""Reading and writing .safetensors files, and refusing everything else.

Pickle-based checkpoints (pytorch_model.bin, .pt, .pth, ...) can run arbitrary code when they are
loaded, so they are recognised by name only and never opened.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from safetensors import safe_open

from pseudoformer.base.atomic_write import atomic_path
from pseudoformer.base.file_access import FileAccessError, loads_json, regular_file

from .errors import WeightsError
from .safetensors_stream import entries, write_stream
from .tensor_ref import TensorRef

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
# Other frameworks' formats that a HF directory may hold instead of safetensors.
FOREIGN_FILES = (
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
    "tf_model.h5",
    "flax_model.msgpack",
)

_CONVERT_FILE = (
    'python -c "import torch, safetensors.torch as st; '
    "st.save_file(torch.load('{src}', weights_only=True), '{dst}')\""
)
_CONVERT_DIR = (
    'python -c "from transformers import AutoModel; '
    "AutoModel.from_pretrained('{src}').save_pretrained('{dst}')\" "
    "(save_pretrained writes safetensors by default; use the model's own class, e.g. "
    "BertForMaskedLM, to keep its head)"
)


def refuse_pickle(path: Path, *, directory: bool = False) -> WeightsError:
    """The error for a checkpoint that only exists in a pickle-based or foreign format."""
    if directory:
        hint = _CONVERT_DIR.format(src=path, dst=f"{path}-safetensors")
    else:
        hint = _CONVERT_FILE.format(src=path, dst=path.with_suffix(".safetensors"))
    return WeightsError(
        f"'{path}': only safetensors is read (pickle checkpoints can execute code when loaded); "
        f"convert with: {hint}"
    )


# safetensors' dtype names -> what a tensor of that dtype is read as (bfloat16 widened to float32).
_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.float32, "I64": np.int64,
           "I32": np.int32, "I16": np.int16, "I8": np.int8, "U64": np.uint64, "U32": np.uint32, "U16": np.uint16,
           "U8": np.uint8, "BOOL": np.bool_}


_BF16_CHUNK = 1 << 22  # bfloat16 values read at a time (8 MB)


def _bf16_tensor(path: Path, name: str) -> np.ndarray:
    """Read one bfloat16 tensor as float32; numpy has no bfloat16, so safetensors.numpy cannot.

    The safetensors layout is an 8-byte little-endian header length, a JSON header giving each
    tensor's dtype, shape and byte range relative to the end of the header, then the raw data.
    bfloat16 is the top half of a float32, so widening is a 16-bit shift.
    """
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = loads_json(f.read(header_len))
        info = header[name]
        start, end = info["data_offsets"]
        f.seek(8 + header_len + start)
        count = (end - start) // 2
        if count != math.prod(info["shape"]):
            raise ValueError(f"{end - start} bytes do not hold a bfloat16 tensor of shape {info['shape']}")
        # Read a chunk at a time into the float32 result: the tensor's 4 bytes a value and one chunk,
        # where reading it whole and widening it took 10 (the bytes, the uint32 copy, the shifted one).
        out = np.empty(count, np.uint32)
        chunk = np.empty(min(count, _BF16_CHUNK), "<u2")
        for at in range(0, count, _BF16_CHUNK):
            part = chunk[:min(_BF16_CHUNK, count - at)]
            if f.readinto(memoryview(part).cast("B")) != part.nbytes:
                raise ValueError("the file ends inside the tensor")
            np.left_shift(part, 16, out=out[at:at + part.size], dtype=np.uint32)
    return out.view(np.float32).reshape(info["shape"])


def _read_one(path: Path, name: str, stored: str) -> np.ndarray:
    try:
        if stored == "BF16":
            return _bf16_tensor(path, name)
        with safe_open(str(path), framework="numpy") as f:
            return f.get_tensor(name)
    except Exception as e:  # the file changed or broke since its header was read
        raise WeightsError(f"cannot read tensor {name} of safetensors file '{path}': {_said(e)}") from e


def _said(e: Exception) -> str:
    """What the safetensors library said, cut to its first line and 200 characters: its refusal of a header
    quotes the header itself, which is the file's to choose and can be megabytes long."""
    lines = str(e).splitlines() or [type(e).__name__]
    return lines[0][:200] + (" …" if len(lines[0]) > 200 or len(lines) > 1 else "")


def open_safetensors(path: str | Path) -> dict[str, TensorRef]:
    """Every tensor of one .safetensors file, by name, as a reference: shapes and dtypes from the
    header, each tensor's data read (a copy of its own) when it is loaded."""
    path = Path(path)
    try:
        regular_file(path, "weights file")
    except FileAccessError as e:
        raise WeightsError(e.message) from None
    try:
        out: dict[str, TensorRef] = {}
        with safe_open(str(path), framework="numpy") as f:
            for name in f.keys():
                piece = f.get_slice(name)
                stored = piece.get_dtype()
                if stored not in _DTYPES:
                    raise WeightsError(f"cannot read safetensors file '{path}': tensor {name} has dtype {stored}, "
                                       "which is not read here")
                out[name] = TensorRef(tuple(int(d) for d in piece.get_shape()), np.dtype(_DTYPES[stored]),
                                      lambda n=name, s=stored: _read_one(path, n, s))
        return out
    except WeightsError:
        raise
    except Exception as e:  # safetensors raises its own SafetensorError
        raise WeightsError(f"cannot read safetensors file '{path}': {_said(e)}") from e


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """All tensors of one .safetensors file, by name, in their stored dtype (bfloat16 -> float32)."""
    return {name: ref.load() for name, ref in open_safetensors(path).items()}


def save_weights(weights: Mapping[str, np.ndarray], path: str | Path) -> None:
    """Write our-named weights to a .safetensors file, atomically.

    The file is written next to its destination and then renamed over it (atomic_write.py), so a
    crash or a full disk never leaves a truncated checkpoint under the real name.
    """
    with atomic_path(Path(path)) as tmp:
        write_safetensors(weights, tmp)


def write_safetensors(weights: Mapping[str, np.ndarray], path: str | Path) -> None:
    """Write our-named weights to `path` as it is (a temporary file of a set being written atomically), one
    tensor at a time (safetensors_stream.py): no copy of the whole set is made."""
    write_stream(entries(dict(weights)), path, metadata={"producer": "pseudoformer"})
