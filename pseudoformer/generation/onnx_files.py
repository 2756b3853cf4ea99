"""The derived graphs of a generator as .onnx files with external data, for onnxruntime to load by path.

A session made from an in-memory ModelProto costs the model's bytes three times over (the arrays, the
protobuf, onnxruntime's copy) and cannot be made past protobuf's 2 GiB: a 0.5B model in fp32 could
not generate. Written to a temporary directory, each weight goes from its array to the file once
(backends/onnx/save.py), and onnxruntime reads the external data itself from the file (memory-mapped,
the offsets being page-aligned), so the arrays can be released before a session is made
(Generator(keep_weights=False), what `pseudoformer generate` does).

The directory lives as long as the generator's runtime and is removed with it, at exit, or when SIGTERM
or SIGINT ends the process (atomic_write.remove_on_signal).
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

from pseudoformer.base.atomic_write import keep_on_signal, remove_on_signal
from pseudoformer.base.errors import UsageError
from pseudoformer.base.limits import show_bytes

# Room left on the disk beyond the weights: the graph itself, and what other programs need.
_DISK_MARGIN = 64 << 20


class OnnxFiles:
    """A temporary directory of lowered models, removed when this object is collected."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="pseudoformer-generate-"))
        remove_on_signal(self.directory)  # an interrupted or terminated generation leaves nothing behind
        self._cleanup = weakref.finalize(self, _remove, self.directory)

    def write(self, name: str, lowered: Any) -> Path:
        """Save `lowered` (a LoweredModel) as NAME.onnx with every weight in NAME.onnx.data; return the path.
        A disk without room for the weights is refused before anything is written, with the numbers."""
        from pseudoformer.backends.onnx import BackendError, save_model

        free = shutil.disk_usage(self.directory).free
        if lowered.nbytes + _DISK_MARGIN > free:
            raise UsageError(f"generating needs {show_bytes(lowered.nbytes)} of weights written to "
                             f"{self.directory} for onnxruntime, and its disk has {show_bytes(free)} free "
                             "(set TMPDIR to a directory on a larger disk)")
        path = self.directory / f"{name}.onnx"
        try:
            # threshold 0: every weight outside; the LoweredModel was checked when it was lowered
            return save_model(lowered, path, external_threshold=0, check=False)
        except BackendError as e:
            raise UsageError(str(e)) from None

    def close(self) -> None:
        self._cleanup()


def _remove(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)
    keep_on_signal(directory)


def load_proto(path: Path) -> Any:
    """The saved model as one ModelProto, its weights read back in (for tests and tools that walk it)."""
    import onnx

    return onnx.load(str(path))
