"""A tensor of a checkpoint known by its shape and dtype, read only when asked.

Mapping a checkpoint is planned from these (hf_engine), so that the whole model is never in memory
twice: a tensor is read when its turn comes and can be released after it is written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class TensorRef:
    shape: tuple[int, ...]
    dtype: np.dtype  # what ``load`` returns: the stored dtype, bfloat16 already widened to float32
    read: Callable[[], np.ndarray] = field(repr=False, compare=False)

    def load(self) -> np.ndarray:
        return self.read()


def in_memory(arrays: Mapping[str, np.ndarray]) -> dict[str, TensorRef]:
    """Arrays already in memory (a torch state dict turned to numpy, say) as references to them."""
    return {name: TensorRef(tuple(a.shape), a.dtype, lambda a=a: a) for name, a in arrays.items()}
