"""Writing a model to disk atomically, with its weights in a side file once it is too big for protobuf.

A reader (onnxruntime, a serving process watching the path) must never see half a model, so
every file is written under a temporary name in the destination directory and moved into place
(pseudoformer/base/atomic_write.py, which also refuses to replace anything but a regular file).

A LoweredModel (lower.py: the model without initializers, and the weights as arrays) is written
without building its protobuf: the small parts are serialised by protobuf, and each weight's
bytes go from its array to the file between them (_write_inline), so a 500 MB model costs one
write of 500 MB, not a copy into a message, a serialisation and a write.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO

import numpy as np
import onnx
from google.protobuf.message import Message
from onnx import TensorProto, helper

from pseudoformer.backends.onnx.lower import LoweredModel, initializer_header
from pseudoformer.base.atomic_write import (
    MAIN,
    OutputError,
    Part,
    atomic_path,
    atomic_set,
    check_output,
    describe,
    write_atomic,
)
from pseudoformer.base.errors import BackendError
from pseudoformer.base.file_access import FileCopy
from pseudoformer.base.limits import show_bytes
from pseudoformer.base.model_files import data_path
from pseudoformer.ir.lazy_tensor import LazyTensor, materialize

# Protobuf refuses to serialise a message of 2 GiB or more; keep a margin for the graph itself.
EXTERNAL_DATA_THRESHOLD = 2**31 - 2**26
# Tensors smaller than this stay inline: not worth a seek, and Constant-like values stay readable.
_MIN_EXTERNAL_TENSOR = 1024
# Page-aligned offsets let onnxruntime memory-map the weights.
_ALIGN = 4096


def save_model(model: onnx.ModelProto | LoweredModel, path: str | os.PathLike, *,
               external_threshold: int | None = None, check: bool = True,
               beside: Mapping[str, bytes | FileCopy] | None = None) -> Path:
    """Write `model` (a ModelProto, or a LoweredModel) to `path` atomically; return the path.

    A model bigger than `external_threshold` bytes (default: just under protobuf's 2 GiB limit)
    has its large weights written to one file `<path>.data` next to it, also atomically, and
    the saved pair is then checked with onnx.checker from the path (unless not `check`: a LoweredModel
    was checked when it was lowered, and the checker reads the weights back). A LoweredModel below the
    threshold is written as the one file that onnx.save_model(model.to_proto()) would write,
    byte for byte, without building that ModelProto.
    """
    path = Path(path)
    threshold = EXTERNAL_DATA_THRESHOLD if external_threshold is None else external_threshold
    if isinstance(model, LoweredModel):
        _check_room(path, model.nbytes + model.skeleton.ByteSize())
    try:
        if isinstance(model, LoweredModel):
            if beside is not None:
                _save_external_lowered(model, path, check, beside)
            elif model.nbytes + model.skeleton.ByteSize() > threshold:
                _save_external_lowered(model, path, check)
            else:
                write_atomic(path, lambda f: _write_inline(model, f))
        elif _byte_size(model, threshold) > threshold:
            _save_external(model, path, check)
        else:
            with atomic_path(path) as tmp:
                onnx.save_model(model, tmp, format="protobuf")
    except OutputError as e:  # no directory, a device at the path, a full disk
        raise BackendError(e.message) from None
    except OSError as e:  # strerror, when there is one: the exception's own text names a temporary file
        raise BackendError(f"cannot write {path}: {describe(e)}") from e
    return path


def _check_room(path: Path, nbytes: int) -> None:
    """Refuse, before writing, a model the destination's disk has no room for (the old file stays)."""
    try:
        free = shutil.disk_usage(path.parent if str(path.parent) else ".").free
    except OSError:
        return  # no such directory: the write says so
    if nbytes > free:
        raise BackendError(f"cannot write {path}: the model takes {show_bytes(nbytes)} and its disk has "
                           f"{show_bytes(free)} free")


def _raw_bytes(t: TensorProto) -> int:
    """The size of a tensor's raw data, computed: reading raw_data would copy it."""
    if not t.HasField("raw_data"):
        return 0
    return math.prod(t.dims) * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize


def _byte_size(model: onnx.ModelProto, threshold: int) -> int:
    raw = sum(_raw_bytes(t) for t in model.graph.initializer)
    # ByteSize serialises, which fails past the protobuf limit, so only ask when well under.
    return raw if raw > threshold else model.ByteSize()


def _save_external(model: onnx.ModelProto, path: Path, check: bool = True) -> None:
    tensors = [t for t in model.graph.initializer if _raw_bytes(t) >= _MIN_EXTERNAL_TENSOR]
    # The caller's model is borrowed, not copied (a copy would double a multi-GiB footprint):
    # tensors are pointed at the data file for serialisation and restored afterwards.
    originals = [t.raw_data for t in tensors]
    try:
        _write_external(model, zip(tensors, originals, strict=True), path, check)
    finally:
        for t, raw in zip(tensors, originals, strict=True):
            t.ClearField("external_data")
            t.ClearField("data_location")  # unset, not DEFAULT: the model must be as it was lent
            t.raw_data = raw


def _save_external_lowered(lowered: LoweredModel, path: Path, check: bool = True,
                           beside: Mapping[str, bytes | FileCopy] | None = None) -> None:
    model = onnx.ModelProto()
    model.CopyFrom(lowered.skeleton)

    def outside() -> Iterator[tuple[TensorProto, np.ndarray]]:
        # one weight at a time: a LazyTensor is computed here, written, and released before the next
        for name, arr in lowered.weights.items():
            t = model.graph.initializer.add()
            t.CopyFrom(initializer_header(name, arr))
            if arr.nbytes >= _MIN_EXTERNAL_TENSOR:
                yield t, _bytes_of(arr)
            else:
                t.raw_data = materialize(arr).tobytes()

    _write_external(model, outside(), path, check, beside or {})


def _write_external(model: onnx.ModelProto, tensors: Iterable[tuple[TensorProto, bytes | np.ndarray]],
                    path: Path, check: bool = True, beside: Mapping[str, bytes | FileCopy] | None = None) -> None:
    """Write each tensor's bytes to `<path>.data`, point the tensor at them, then write `model`."""
    # One set (atomic_write.atomic_set): both files beside the resolved target (through a symbolic
    # link -o, beside the file it leads to), the weights moved into place first and the .onnx, which
    # names them, last.
    # A file copied from a checkpoint (a tokenizer) is never written more open than its source.
    others = [Part(f"beside:{name}", lambda target, name=name: target.with_name(name),
                   mode=content.mode if isinstance(content, FileCopy) else 0o777)
              for name, content in (beside or {}).items()]
    with atomic_set(path, [Part("data", data_path), *others, MAIN]) as tmps:
        data, data_tmp, model_tmp = data_path(check_output(path)), tmps["data"], tmps["main"]
        for name, content in (beside or {}).items():
            tmps[f"beside:{name}"].write_bytes(content.data if isinstance(content, FileCopy) else content)
        with open(data_tmp, "wb") as f:
            for t, raw in tensors:
                offset = (f.tell() + _ALIGN - 1) // _ALIGN * _ALIGN
                f.seek(offset)
                f.write(raw)
                _point_at(t, data.name, offset, len(raw))
        onnx.save_model(model, model_tmp, format="protobuf")
    if not check:
        return
    try:
        onnx.checker.check_model(str(check_output(path)), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise BackendError(f"{path} was written but fails the ONNX checker: {e}") from e


def _point_at(t: TensorProto, location: str, offset: int, length: int) -> None:
    del t.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    t.data_location = TensorProto.EXTERNAL
    t.ClearField("raw_data")


# ---- a LoweredModel as one protobuf, its weights written from their arrays
#
# A protobuf message on the wire is the concatenation of its fields; a field of an embedded
# message or of bytes is its key (field number << 3 | 2) and a varint length, then the bytes. So
# ModelProto = [fields before graph] [graph] [fields after], GraphProto = [fields before
# initializer] [initializer]... [fields after], and TensorProto = [dims, data_type, name] [raw_data].
# Protobuf serialises every part but the weights' bytes; the lengths around them are computed.
# Fields go in field-number order, as protobuf writes them, so the file equals the serialised
# to_proto() byte for byte (tests/backends/test_onnx_fast_save.py checks it).

_GRAPH = onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number  # 7
_INITIALIZER = onnx.GraphProto.DESCRIPTOR.fields_by_name["initializer"].number  # 5
_RAW_DATA = onnx.TensorProto.DESCRIPTOR.fields_by_name["raw_data"].number  # 9


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def _length_prefix(field: int, length: int) -> bytes:
    """The key and length of a length-delimited field (wire type 2) of `length` bytes."""
    return _varint(field << 3 | 2) + _varint(length)


def _split(message: Message, field: int) -> tuple[Message, Message]:
    """Two copies of `message`: one with its fields numbered below `field`, one with those above."""
    before, after = type(message)(), type(message)()
    before.CopyFrom(message)
    after.CopyFrom(message)
    for fd, _ in message.ListFields():
        if fd.number >= field:
            before.ClearField(fd.name)
        if fd.number <= field:
            after.ClearField(fd.name)
    return before, after


def _write_inline(lowered: LoweredModel, f: IO[bytes]) -> None:
    head, tail = _split(lowered.skeleton, _GRAPH)
    graph_head, graph_tail = (m.SerializeToString() for m in _split(lowered.skeleton.graph, _INITIALIZER))
    tensors = []
    for name, arr in lowered.weights.items():
        header = initializer_header(name, arr).SerializeToString() + _length_prefix(_RAW_DATA, arr.nbytes)
        tensors.append((_length_prefix(_INITIALIZER, len(header) + arr.nbytes) + header, arr))
    graph_size = len(graph_head) + sum(len(prefix) + arr.nbytes for prefix, arr in tensors) + len(graph_tail)
    # onnx writes the model's first fields, so a failing onnx.save_model fails the save as before.
    onnx.save_model(head, f, format="protobuf")
    f.write(_length_prefix(_GRAPH, graph_size))
    f.write(graph_head)
    for prefix, arr in tensors:
        f.write(prefix)
        f.write(_bytes_of(arr))
    f.write(graph_tail)
    f.write(tail.SerializeToString())


def _bytes_of(arr: np.ndarray | LazyTensor) -> np.ndarray:
    """`arr`'s buffer as a 1-d uint8 array (a view, no copy), which file.write and len take as bytes;
    a LazyTensor's is computed."""
    return materialize(arr).reshape(-1).view(np.uint8)
