"""The PyTorch backend's one import of torch: a missing torch is a BackendError that says what to install."""

from __future__ import annotations

from types import ModuleType

from pseudoformer.base.errors import BackendError


def require_torch() -> ModuleType:
    try:
        import torch
    except ImportError as e:
        raise BackendError("the torch backend needs PyTorch: pip install 'pseudoformer[torch]'") from e
    return torch
