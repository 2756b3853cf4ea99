"""Writing a model to disk atomically, with its weights in a side file once it is too big for protobuf.

A reader (onnxruntime, a serving process watching the path) must never see half a model, so
every file is written under a temporary name in the destination directory and moved into place
with os.replace, which is atomic within one file system.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from pseudoformer.backends.onnx.errors import BackendError

# Protobuf refuses to serialise a message of 2 GiB or more; keep a margin for the graph itself.
EXTERNAL_DATA_THRESHOLD = 2**31 - 2**26
# Tensors smaller than this stay inline: not worth a seek, and Constant-like values stay readable.
_MIN_EXTERNAL_TENSOR = 1024
# Page-aligned offsets let onnxruntime memory-map the weights.
_ALIGN = 4096


def save_model(model: onnx.ModelProto, path: str | os.PathLike, *, external_threshold: int | None = None) -> Path:
    """Write `model` to `path` atomically; return the path.

    A model bigger than `external_threshold` bytes (default: just under protobuf's 2 GiB limit)
    has its large weights written to one file `<path>.data` next to it, also atomically, and
    the saved pair is then checked with onnx.checker from the path.
    """
    path = Path(path)
    threshold = EXTERNAL_DATA_THRESHOLD if external_threshold is None else external_threshold
    if not path.parent.is_dir():
        raise BackendError(f"cannot save {path}: directory {path.parent} does not exist")
    try:
        if _byte_size(model, threshold) > threshold:
            _save_external(model, path)
        else:
            with _temporary(path) as tmp:
                onnx.save_model(model, tmp, format="protobuf")
                _fsync(tmp)
                os.replace(tmp, path)
    except OSError as e:
        # strerror, when there is one, because the exception's own text names our temporary file.
        raise BackendError(f"cannot save the model to {path}: {e.strerror or e}") from e
    return path


def data_path(path: str | os.PathLike) -> Path:
    """Where save_model puts the weights of a model saved at `path` with external data."""
    path = Path(path)
    return path.with_name(path.name + ".data")


def _raw_bytes(t: TensorProto) -> int:
    """The size of a tensor's raw data, computed: reading raw_data would copy it."""
    if not t.HasField("raw_data"):
        return 0
    return math.prod(t.dims) * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize


def _byte_size(model: onnx.ModelProto, threshold: int) -> int:
    raw = sum(_raw_bytes(t) for t in model.graph.initializer)
    # ByteSize serialises, which fails past the protobuf limit, so only ask when well under.
    return raw if raw > threshold else model.ByteSize()


@contextlib.contextmanager
def _temporary(path: Path):
    """A fresh temporary file name beside `path`, removed on the way out unless it was moved."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    # mkstemp makes the file private (0600); the result should get the usual permissions.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        yield tmp
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _fsync(file: str) -> None:
    with open(file, "rb") as f:
        os.fsync(f.fileno())


def _save_external(model: onnx.ModelProto, path: Path) -> None:
    data = data_path(path)
    tensors = [t for t in model.graph.initializer if _raw_bytes(t) >= _MIN_EXTERNAL_TENSOR]
    # The caller's model is borrowed, not copied (a copy would double a multi-GiB footprint):
    # tensors are pointed at the data file for serialisation and restored afterwards.
    originals = [t.raw_data for t in tensors]
    try:
        with _temporary(data) as data_tmp, _temporary(path) as model_tmp:
            with open(data_tmp, "wb") as f:
                for t, raw in zip(tensors, originals, strict=True):
                    offset = (f.tell() + _ALIGN - 1) // _ALIGN * _ALIGN
                    f.seek(offset)
                    f.write(raw)
                    _point_at(t, data.name, offset, len(raw))
                f.flush()
                os.fsync(f.fileno())
            onnx.save_model(model, model_tmp, format="protobuf")
            _fsync(model_tmp)
            # Weights first: a model file that names missing weights is worse than stale weights.
            os.replace(data_tmp, data)
            os.replace(model_tmp, path)
    finally:
        for t, raw in zip(tensors, originals, strict=True):
            t.ClearField("external_data")
            t.ClearField("data_location")  # unset, not DEFAULT: the model must be as it was lent
            t.raw_data = raw
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise BackendError(f"{path} was written but fails the ONNX checker: {e}") from e


def _point_at(t: TensorProto, location: str, offset: int, length: int) -> None:
    del t.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    t.data_location = TensorProto.EXTERNAL
    t.ClearField("raw_data")
