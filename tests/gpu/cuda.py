"""The mark every CUDA test carries: `pytest -m cuda` selects them, and each skips with its reason wherever
onnxruntime has no CUDAExecutionProvider (the CPU package never has one; onnxruntime-gpu only with an NVIDIA
driver present)."""

from __future__ import annotations

import onnxruntime
import pytest

HAS_CUDA = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
NO_CUDA = "no CUDAExecutionProvider in this onnxruntime (install pseudoformer[gpu] on a machine with an NVIDIA GPU)"


CUDA_MARKS = [pytest.mark.cuda, pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)]  # for pytest.param(marks=…)


def cuda(test):  # type: ignore[no-untyped-def]
    """Marked `cuda`, and skipped with NO_CUDA where there is none."""
    return pytest.mark.cuda(pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)(test))
