"""Shared by the TVM backend's tests: the import guard and the ONNX tests' cases, reused as they are.

No __init__.py here, on purpose: this folder is called tvm, and as a package it would shadow the
real tvm for anything that puts tests/backends on sys.path.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# tvm.relax, not tvm: with TVM missing, this very folder imports as an empty namespace package "tvm".
pytest.importorskip("tvm.relax", reason="apache-tvm is not installed: pip install pseudoformer[tvm]")

BACKENDS = Path(__file__).resolve().parents[1]
if str(BACKENDS) not in sys.path:  # the ONNX tests' case tables live there, and are ours too
    sys.path.append(str(BACKENDS))


def cpu_flags() -> set[str]:
    """This CPU's feature flags as Linux lists them (empty elsewhere): which kernel paths a test can run."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())
