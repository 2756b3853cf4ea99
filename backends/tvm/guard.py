"""The TVM import guard: the tvm module, or a BackendError that says how to install it."""

from __future__ import annotations

import importlib
from types import ModuleType

from pseudoformer.base.errors import BackendError

__all__ = ["INSTALL_HINT", "require_tvm"]

INSTALL_HINT = "the TVM backend needs apache-tvm, which is not installed: install pseudoformer[tvm]"


def require_tvm() -> ModuleType:
    """The tvm module, or a BackendError that says how to install it.

    `tvm.relax` is imported too: a folder named tvm on sys.path (tests/backends/tvm is one when
    pytest puts tests/backends there) imports as an empty namespace package when TVM is missing.
    """
    try:
        tvm = importlib.import_module("tvm")
        importlib.import_module("tvm.relax")
    except ImportError as e:
        raise BackendError(f"{INSTALL_HINT} ({e})") from e
    return tvm
