"""A weight that arrived block-quantized (a GGUF Q4_0 or Q8_0 matrix): its values, and the codes they came from.

A checkpoint in llama.cpp's Q4_0 or Q8_0 holds each row of a weight matrix as blocks of 32 codes and a
float16 scale d. Those blocks are exactly onnxruntime's MatMulNBits with 32-wide blocks and the
default zero point (Q4_0: w = d·(q − 8), q a nibble; Q8_0: w = d·i, i an int8, which is d·(u − 128)
with u = i + 128), so the quantize pass (passes/quantize.py) can keep them as they are instead of
quantizing the dequantized values again, which would add a second rounding.

BlockCoded is an ndarray (the dequantized float32 values, which the interpreter and every other pass
use as any weight) that also carries its codes. Only the array itself and copies of it carry them:
a view of part of it, or an array computed from it, is a plain weight (``__array_finalize__``).
A weight streamed from the file (weights/loader.py's open_weights) is a LazyBlockCoded: the codes
known before the values are read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .lazy_tensor import LazyTensor

# GGUF's block formats that map onto MatMulNBits unchanged: bits per code, bytes per block of 32.
FORMATS = {"Q4_0": (4, 18), "Q8_0": (8, 34)}
BLOCK = 32


@dataclass(frozen=True)
class Codes:
    """The GGUF blocks of a matrix's rows: ``read()`` gives uint8 [rows, K/32 · block bytes].

    ``transposed``: the array holding these codes is the matrix's transpose (the paper's embedding
    W_e ∈ ℝ^{d_e × N_V} is the GGUF table [N_V, d_e] read column-wise)."""

    format: str
    read: Callable[[], np.ndarray]
    transposed: bool = False

    @property
    def bits(self) -> int:
        return FORMATS[self.format][0]


class BlockCoded(np.ndarray):
    codes: Codes | None

    def __new__(cls, values: np.ndarray, codes: Codes) -> BlockCoded:
        out = np.asarray(values).view(cls)
        out.codes = codes
        return out

    def __array_finalize__(self, obj: object) -> None:
        # A copy of the whole array (same shape and strides) keeps the codes; a part, or a product, does not.
        same = isinstance(obj, BlockCoded) and obj.shape == self.shape and obj.strides == self.strides \
            and obj.dtype == self.dtype
        self.codes = obj.codes if same else None  # type: ignore[union-attr]


@dataclass(frozen=True)
class LazyBlockCoded(LazyTensor):
    """A LazyTensor of a block-coded weight: its values read when loaded, its codes known now."""

    codes: Codes | None = field(default=None, repr=False, compare=False)


def plain_weights(weights: Mapping[str, Any]) -> dict[str, Any]:
    """The weights without their blocks (the same values, as plain arrays): computed with as they are."""
    return {k: v.view(np.ndarray) if isinstance(v, BlockCoded)
            else LazyTensor(v.shape, v.dtype, v.compute) if isinstance(v, LazyBlockCoded) else v
            for k, v in weights.items()}


def codes_of(value: object) -> Codes | None:
    return value.codes if isinstance(value, BlockCoded | LazyBlockCoded) else None


def matmul_nbits(blocks: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """GGUF blocks uint8 [N, K/32 · bytes] → MatMulNBits' packed codes [N, K/32, 32·bits/8] and float32
    scales [N, K/32], for the default zero point (8 at 4 bits, 128 at 8): no zero-point input."""
    bits, size = FORMATS[fmt]
    n = blocks.shape[0]
    b = blocks.reshape(n, -1, size)
    scales = b[..., :2].copy().view(np.float16)[..., 0].astype(np.float32)
    qs = b[..., 2:]
    if bits == 8:  # int8 i → i + 128: flipping the sign bit adds 128 modulo 256
        return np.ascontiguousarray(qs ^ 0x80), scales
    # GGUF: byte j holds element j (low nibble) and j + 16 (high). MatMulNBits: byte j holds 2j (low), 2j + 1.
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # the 32 codes in order
    return np.ascontiguousarray(q[..., 0::2] | (q[..., 1::2] << 4)), scales
