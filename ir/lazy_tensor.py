"""A weight known by its shape and dtype, computed only when a writer asks for its values.

Weights travel between the stages as a mapping of name → array. Where making an array costs memory
that nothing needs at once — a weight folded at compile time (passes/fold_constants.py), a
checkpoint tensor widened from bfloat16 — the mapping holds a LazyTensor instead: what a pass or a
lowering needs (shape, dtype, bytes) without the values, and `load()` to compute them. The ONNX
writer (backends/onnx/save.py) loads one, writes it and lets it go before the next, so a model's
weights pass through memory one tensor at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class LazyTensor:
    shape: tuple[int, ...]
    dtype: np.dtype
    compute: Callable[[], np.ndarray] = field(repr=False, compare=False)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    def load(self) -> np.ndarray:
        """The values, as a C-contiguous array of the declared shape and dtype (a new one each call)."""
        a = np.asarray(self.compute())
        if tuple(a.shape) != tuple(self.shape):
            raise ValueError(f"a lazy tensor of shape {self.shape} computed one of shape {a.shape}")
        return np.ascontiguousarray(a, dtype=self.dtype)

    def astype(self, dtype: Any) -> LazyTensor:
        """The same tensor converted to `dtype` when loaded."""
        dtype = np.dtype(dtype)
        return self if dtype == self.dtype else LazyTensor(self.shape, dtype, self.load)


def materialize(value: Any) -> np.ndarray:
    """An array's values: a LazyTensor loaded, anything else as numpy sees it."""
    return value.load() if isinstance(value, LazyTensor) else np.asarray(value)
