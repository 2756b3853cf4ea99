"""Reading a GGUF file's header: its metadata and where each tensor lies, every count checked first.

GGUF (llama.cpp's format): magic ``GGUF``, version, tensor and key counts, the key/value metadata,
the tensor infos (name, dims, ggml type, offset), then the tensor data from an aligned offset.

This parser is our own, not gguf's GGUFReader, because the file is input from anyone: GGUFReader
loops in Python over whatever count an array declares before it meets the end of the file (a
"vocabulary" of 10⁹ entries costs minutes and gigabytes) and fails with a bare ValueError or
IndexError that names neither the key nor the offset. Here every count is checked against the bytes
left before anything is allocated, and every failure is one WeightsError naming the file and what is
wrong. The data stays in a read-only memory map: a tensor is read when it is loaded (gguf_checkpoint).
gguf's constants (type numbers, block sizes) and its numpy dequantizers are used as they are.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from pseudoformer.base.regular_file import NotRegularFile, open_regular

from .errors import WeightsError

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
# Bounds on what a header may declare. Real files: a few hundred keys, a few thousand tensors, arrays up
# to the vocabulary's and merges' size (256k tokens, ~500k merges), names of a few dozen bytes.
MAX_KEYS = 1 << 16
MAX_TENSORS = 1 << 20
MAX_ARRAY = 1 << 24
MAX_STRING = 1 << 20
MAX_DIMS = 4

_SCALARS: dict[int, str] = {
    GGUFValueType.UINT8: "<u1", GGUFValueType.INT8: "<i1", GGUFValueType.UINT16: "<u2",
    GGUFValueType.INT16: "<i2", GGUFValueType.UINT32: "<u4", GGUFValueType.INT32: "<i4",
    GGUFValueType.FLOAT32: "<f4", GGUFValueType.BOOL: "<u1", GGUFValueType.UINT64: "<u8",
    GGUFValueType.INT64: "<i8", GGUFValueType.FLOAT64: "<f8",
}
INT_TYPES = frozenset({GGUFValueType.UINT8, GGUFValueType.INT8, GGUFValueType.UINT16, GGUFValueType.INT16,
                       GGUFValueType.UINT32, GGUFValueType.INT32, GGUFValueType.UINT64, GGUFValueType.INT64})
FLOAT_TYPES = frozenset({GGUFValueType.FLOAT32, GGUFValueType.FLOAT64})


@dataclass(frozen=True)
class Value:
    """One metadata value and its GGUF type (``item`` is the element type of an array)."""

    type: GGUFValueType
    value: Any
    item: GGUFValueType | None = None

    def describe(self) -> str:
        return f"an array of {self.item.name}" if self.item is not None else self.type.name


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # numpy order (GGUF lists ne0, the row length, first): [rows, row length]
    qtype: GGMLQuantizationType
    offset: int  # absolute, in the file
    nbytes: int


class GGUFFile:
    """A parsed GGUF header over a read-only memory map of the file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            fd, st = open_regular(self.path)  # a FIFO or a device is refused before it is read
            assert fd is not None
            with os.fdopen(fd, "rb") as f:
                if st.st_size < 24:
                    self._map: mmap.mmap | bytes = f.read(24)
                else:
                    self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except NotRegularFile as e:
            raise WeightsError(f"GGUF file '{self.path}' is {e.kind}, not a regular file") from None
        except OSError as e:
            raise WeightsError(f"cannot read GGUF file '{self.path}': {e.strerror or e}") from None
        self.size = len(self._map)
        self._pos = 0
        if bytes(self._map[:4]) != MAGIC:
            raise self.error("not a GGUF file: it does not start with the bytes 'GGUF'", at=None)
        if self.size < 24:
            raise self.error(f"truncated: {self.size} bytes, shorter than a GGUF header", at=None)
        self._pos = 4
        version = self._unpack("<I", "version")
        if version not in VERSIONS:
            raise self.error(f"GGUF version {version} is not supported (versions {', '.join(map(str, VERSIONS))}; "
                             "a big-endian file reads as a huge version)", at=4)
        n_tensors, n_keys = self._unpack("<Q", "tensor count"), self._unpack("<Q", "key count")
        if n_keys > MAX_KEYS or n_tensors > MAX_TENSORS:
            raise self.error(f"the header declares {n_keys:,} metadata keys and {n_tensors:,} tensors "
                             f"(at most {MAX_KEYS:,} and {MAX_TENSORS:,})", at=8)
        self.version = version
        self.metadata: dict[str, Value] = {}
        for _ in range(n_keys):
            key = self._string("a metadata key")
            if key in self.metadata:
                raise self.error(f"metadata key {key!r} appears twice")
            self.metadata[key] = self._value(key)
        infos = [self._tensor_info() for _ in range(n_tensors)]
        alignment = self._alignment()
        data_start = -(-self._pos // alignment) * alignment
        self.tensors: dict[str, TensorInfo] = {}
        for name, shape, qtype, offset in infos:
            if name in self.tensors:
                raise self.error(f"tensor {name!r} appears twice")
            if offset % alignment:
                raise self.error(f"tensor {name!r}: offset {offset} is not a multiple of the alignment {alignment}")
            block, block_bytes = GGML_QUANT_SIZES[qtype]
            if shape[-1] % block:
                raise self.error(f"tensor {name!r}: rows of {shape[-1]} elements do not fill {qtype.name} blocks "
                                 f"of {block}")
            count = int(np.prod(shape, dtype=object))
            nbytes = count // block * block_bytes
            start = data_start + offset
            if start + nbytes > self.size:
                raise self.error(f"tensor {name!r} ({qtype.name}, shape {shape}) needs bytes {start:,} to "
                                 f"{start + nbytes:,}, past the end of the file ({self.size:,} bytes): "
                                 "the file is truncated or its tensor table is wrong", at=None)
            self.tensors[name] = TensorInfo(name, shape, qtype, start, nbytes)

    def error(self, what: str, at: int | None | str = "pos") -> WeightsError:
        where = f" (at byte {self._pos if at == 'pos' else at:,})" if at is not None else ""
        return WeightsError(f"GGUF file '{self.path}': {what}{where}")

    def raw(self, info: TensorInfo) -> np.ndarray:
        """The tensor's bytes, a read-only view of the map (nothing is copied until it is used)."""
        return np.frombuffer(self._map, np.uint8, info.nbytes, info.offset)

    def release(self, info: TensorInfo) -> None:
        """Let the pages of a tensor that was read (and copied or dequantized) leave this process's memory.

        A page of the map that was read stays resident, and counted in the process's RSS, until the map
        is closed: reading a 4 GB file one tensor at a time would end holding all 4 GB. The map is the
        file's (shared, read-only), so the kernel reads a dropped page back from the page cache should
        it be touched again: a page that a neighbouring tensor shares is safe to drop with it."""
        if isinstance(self._map, mmap.mmap) and info.nbytes:
            start = info.offset - info.offset % mmap.PAGESIZE
            self._map.madvise(mmap.MADV_DONTNEED, start, min(info.offset + info.nbytes, self.size) - start)

    # ---- the header's primitives, each checked against the bytes left ----

    def _need(self, n: int, what: str) -> None:
        if self._pos + n > self.size:
            raise self.error(f"truncated: {what} needs {n:,} bytes, and {self.size - self._pos:,} are left")

    def _unpack(self, fmt: str, what: str) -> Any:
        n = struct.calcsize(fmt)
        self._need(n, what)
        (v,) = struct.unpack_from(fmt, self._map, self._pos)
        self._pos += n
        return v

    def _string(self, what: str) -> str:
        n = self._unpack("<Q", what)
        if n > MAX_STRING:
            raise self.error(f"{what} declares a string of {n:,} bytes (at most {MAX_STRING:,})")
        self._need(n, what)
        raw = bytes(self._map[self._pos:self._pos + n])
        self._pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.error(f"{what} is not UTF-8 text") from None

    def _type(self, key: str) -> GGUFValueType:
        code = self._unpack("<I", f"the type of {key!r}")
        try:
            return GGUFValueType(code)
        except ValueError:
            raise self.error(f"metadata {key!r} has unknown value type {code}") from None

    def _value(self, key: str) -> Value:
        kind = self._type(key)
        if kind == GGUFValueType.STRING:
            return Value(kind, self._string(f"the value of {key!r}"))
        if kind != GGUFValueType.ARRAY:
            v = np.frombuffer(self._bytes(np.dtype(_SCALARS[kind]).itemsize, key), _SCALARS[kind])[0]
            return Value(kind, bool(v) if kind == GGUFValueType.BOOL else v.item())
        item = self._type(key)
        count = self._unpack("<Q", f"the length of {key!r}")
        if item == GGUFValueType.ARRAY:
            raise self.error(f"metadata {key!r} is an array of arrays, which no model key is")
        least = 8 if item == GGUFValueType.STRING else np.dtype(_SCALARS[item]).itemsize
        if count > MAX_ARRAY or count * least > self.size - self._pos:
            raise self.error(f"metadata {key!r} declares {count:,} entries, more than "
                             f"{'the file holds' if count <= MAX_ARRAY else f'{MAX_ARRAY:,} (the most read)'}")
        if item == GGUFValueType.STRING:
            return Value(kind, [self._string(f"entry {i} of {key!r}") for i in range(count)], item)
        values = np.frombuffer(self._bytes(count * least, key), _SCALARS[item]).copy()
        return Value(kind, values.astype(bool) if item == GGUFValueType.BOOL else values, item)

    def _bytes(self, n: int, key: str) -> bytes:
        self._need(n, f"the value of {key!r}")
        out = bytes(self._map[self._pos:self._pos + n])
        self._pos += n
        return out

    def _tensor_info(self) -> tuple[str, tuple[int, ...], GGMLQuantizationType, int]:
        name = self._string("a tensor name")
        n_dims = self._unpack("<I", f"the rank of tensor {name!r}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise self.error(f"tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS})")
        dims = [self._unpack("<Q", f"the dims of tensor {name!r}") for _ in range(n_dims)]
        if any(d == 0 or d >= 1 << 40 for d in dims):
            raise self.error(f"tensor {name!r} has dims {dims}: each must be positive and below 2^40")
        code = self._unpack("<I", f"the type of tensor {name!r}")
        try:
            qtype = GGMLQuantizationType(code)
        except ValueError:
            raise self.error(f"tensor {name!r} has unknown ggml type {code}") from None
        offset = self._unpack("<Q", f"the offset of tensor {name!r}")
        return name, tuple(reversed(dims)), qtype, offset

    def _alignment(self) -> int:
        v = self.metadata.get("general.alignment")
        if v is None:
            return DEFAULT_ALIGNMENT
        if v.type != GGUFValueType.UINT32 or not v.value or v.value & (v.value - 1):
            raise self.error(f"general.alignment = {v.value!r} ({v.describe()}) is not a power of two (UINT32)",
                             at=None)
        return int(v.value)
