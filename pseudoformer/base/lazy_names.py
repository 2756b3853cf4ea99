"""A package's public names, imported from their modules on first use (PEP 562).

A package whose __init__ imported its modules would run them all for an import of any one of them: `import
pseudoformer.weights.safetensors_io` (which the TVM backend saves with) would read the HF and GGUF checkpoint
readers too, and `import pseudoformer` would read numpy and onnx. The package lists each name's module instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_names(package: str, names: Mapping[str, str], namespace: dict[str, Any]) -> tuple[
        Callable[[str], object], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`, whose `names` map each public name to its module."""

    def __getattr__(name: str) -> object:
        if name in names:
            value = getattr(import_module(names[name]), name)
            namespace[name] = value  # later look-ups skip this function
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*namespace, *names})

    return __getattr__, __dir__
