"""The names of the files one model is saved as, beside the file `-o` names (resolved through links).

Shared by the backends that write them (backends/onnx/save.py, backends/tvm/build.py), by `run`,
which reads them, and by the CLI, which checks them before any work (outputs.py).
"""

from __future__ import annotations

from pathlib import Path


def data_path(path: Path) -> Path:
    """model.onnx → model.onnx.data: an ONNX model's weights, once it is too big for one file."""
    path = Path(path)
    return path.with_name(path.name + ".data")


def weights_path(library: Path) -> Path:
    """model.so → model.weights.safetensors: where a library compiled with params="args" keeps its weights."""
    library = Path(library)
    return library.with_name(f"{library.stem}.weights.safetensors")


def manifest_path(library: Path) -> Path:
    """model.so → model.manifest.json: the TVM library's manifest (manifest.py)."""
    library = Path(library)
    return library.with_name(f"{library.stem}.manifest.json")
