"""A .safetensors file written one tensor at a time: the header from the tensors' shapes and dtypes, then
each tensor's bytes as it is produced, so that writing a checkpoint holds at most one tensor besides those
it was given (safetensors' own save_file first copies every tensor into one bytes object).

The layout is the format's: an 8-byte little-endian header length, the JSON header (each tensor's dtype,
shape and [begin, end) byte offsets into the data, and `__metadata__`), padded with spaces to a multiple of
8 bytes, then the data, each tensor after the one before it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

DTYPES = {np.dtype(np.float64): "F64", np.dtype(np.float32): "F32", np.dtype(np.float16): "F16",
          np.dtype(np.int64): "I64", np.dtype(np.int32): "I32", np.dtype(np.int16): "I16",
          np.dtype(np.int8): "I8", np.dtype(np.uint8): "U8", np.dtype(np.uint16): "U16",
          np.dtype(np.uint32): "U32", np.dtype(np.uint64): "U64", np.dtype(np.bool_): "BOOL"}


@dataclass(frozen=True)
class Entry:
    """One tensor to write: its name, shape and dtype, and how to make its values when its turn comes."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    make: Callable[[], np.ndarray]


def entries(weights: dict[str, np.ndarray] | Iterable[tuple[str, np.ndarray]]) -> list[Entry]:
    """Arrays already in memory as entries."""
    items = weights.items() if isinstance(weights, dict) else weights
    out = []
    for name, value in items:
        if not isinstance(name, str):
            raise TypeError(f"weight names must be str, got {type(name).__name__}: {name!r}")
        a = np.asarray(value)
        out.append(Entry(name, tuple(a.shape), a.dtype, lambda a=a: a))
    return out


def write_stream(tensors: list[Entry], path: str | Path, metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` to `path` (opened as it is: a temporary file of an atomic write), one at a time."""
    header: dict[str, object] = {"__metadata__": dict(metadata or {})} if metadata else {}
    start = 0
    for e in tensors:
        if np.dtype(e.dtype) not in DTYPES:
            raise TypeError(f"{e.name}: no safetensors dtype for {e.dtype}")
        size = int(np.prod(e.shape, dtype=np.int64)) * np.dtype(e.dtype).itemsize
        header[e.name] = {"dtype": DTYPES[np.dtype(e.dtype)], "shape": list(e.shape), "data_offsets": [start, start + size]}
        start += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)))
        fh.write(text)
        for e in tensors:
            _write(fh, e)


def _write(fh: BinaryIO, e: Entry) -> None:
    a = np.asarray(e.make())
    if tuple(a.shape) != tuple(e.shape) or a.dtype != np.dtype(e.dtype):
        raise ValueError(f"{e.name}: made {a.dtype}{list(a.shape)}, declared {np.dtype(e.dtype)}{list(e.shape)}")
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    fh.write(memoryview(a).cast("B") if a.size else b"")
