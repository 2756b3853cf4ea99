"""The ONNX backend's user-facing exception: the one all backends share."""

from __future__ import annotations

from pseudoformer.backends.errors import BackendError

__all__ = ["BackendError"]
