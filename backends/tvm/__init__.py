"""The TVM backend: lower an IR graph to Relax, compile it with TVM, run it on the Relax VM, save a .so.

It needs apache-tvm (pip install pseudoformer[tvm]). Importing this package does not: its names
load on first use, and without TVM that raises BackendError with the install advice, which the
API and the CLI (api.py) turn into a one-line error.
"""

from __future__ import annotations

import importlib
from typing import Any

from pseudoformer.backends.tvm.guard import INSTALL_HINT, require_tvm
from pseudoformer.base.errors import BackendError

_LAZY = {
    "TVMModel": "build", "compile_graph": "build", "load_model": "build", "make_target": "build",
    "Lowered": "lower", "to_relax": "lower",
}

__all__ = ["INSTALL_HINT", "BackendError", "require_tvm", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
