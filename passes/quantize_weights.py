"""Choosing the codes, scales and zero points of block-quantized weights, in numpy, at compile time.

Two methods, neither needing calibration data:

  rtn   round to nearest over each block's range: asymmetric [min(w, 0), max(w, 0)] onto 0 … 2^b − 1,
        symmetric max |w| onto ±(2^(b−1) − 1) around the fixed zero point 2^(b−1).
  mse   (the default) per block, the clipping of that range that minimises the block's squared
        error: the range is shrunk by each factor of a grid (a block's extreme weights are rare; giving
        them up buys a finer step for all the others), the best kept, and its scale then refitted by
        least squares for its codes (s = Σ w·(q − z) / Σ (q − z)², which can only lower the error), and
        the codes re-rounded, while that helps.

The error a block's codes leave in a matmul's output is, for activations with no preferred direction,
proportional to the block's squared weight error, which is why that is what `mse` minimises; see
docs/quantization.md for the measurements that chose it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pseudoformer.ir.ops.quantized import default_zero_point, k_blocks, pack

METHODS = ("mse", "rtn")
# Shrink factors of the range tried by `mse`; 1.0 is round to nearest.
_GRID = np.linspace(1.0, 0.6, 11, dtype=np.float32)
_REFITS = 3
_CHUNK = 1 << 22  # weights quantized at a time, to bound the temporaries


@dataclass(frozen=True)
class Quantized:
    packed: np.ndarray  # uint8 [N, k_blocks, block_size · bits / 8]
    scales: np.ndarray  # float32 [N, k_blocks]
    zero_points: np.ndarray | None  # uint8 packed [N, ⌈k_blocks · bits / 8⌉], None when symmetric


def quantize(w: np.ndarray, *, bits: int, block_size: int, symmetric: bool, method: str = "mse") -> Quantized:
    """W [N, K] (N outputs, blocks along K) → its packed codes, scales and zero points."""
    if method not in METHODS:
        raise ValueError(f"unknown quantization method {method!r} (choose {', '.join(METHODS)})")
    n, k = w.shape
    kb = k_blocks(k, block_size)
    padded = np.zeros((n, kb * block_size), np.float32)
    padded[:, :k] = w  # zeros: exactly representable, so the padding adds no error and moves no range
    blocks = padded.reshape(n * kb, block_size)
    codes = np.empty(blocks.shape, np.uint8)
    scales = np.empty(n * kb, np.float32)
    zeros = np.empty(n * kb, np.uint8)
    rows = max(1, _CHUNK // block_size)
    for start in range(0, n * kb, rows):
        part = slice(start, start + rows)
        codes[part], scales[part], zeros[part] = _blocks(blocks[part], bits, symmetric, method)
    packed, zp = pack(codes.reshape(n, kb, block_size), None if symmetric else zeros.reshape(n, kb), k, bits)
    return Quantized(packed, scales.reshape(n, kb), zp)


def _blocks(b: np.ndarray, bits: int, symmetric: bool, method: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codes [m, bs], scales [m] and zero points [m] of m blocks."""
    qmax = float((1 << bits) - 1)
    if symmetric:
        half = float(default_zero_point(bits) - 1)  # ±7 at 4 bits: the code 0 (−8) stays unused by the range
        amax = np.abs(b).max(axis=1)
        lo, hi, z = -amax, amax, np.full(len(b), default_zero_point(bits), np.float32)
    else:
        lo, hi = np.minimum(b.min(axis=1), 0), np.maximum(b.max(axis=1), 0)
    best_q = best_s = best_z = best_err = None
    for alpha in (_GRID if method == "mse" else _GRID[:1]):
        if symmetric:
            s = hi * alpha / half
        else:
            s = (hi - lo) * alpha / qmax
            z = np.clip(np.rint(-lo * alpha / _safe(s)), 0, qmax)
        q, err = _round(b, s, z, qmax)
        if best_err is None:
            best_q, best_s, best_z, best_err = q, s, z, err
            continue
        better = err < best_err
        best_q[better], best_s[better], best_err[better] = q[better], s[better], err[better]
        if not symmetric:
            best_z = np.where(better, z, best_z)
    if method == "mse":
        for _ in range(_REFITS):
            z = best_z
            c = best_q - z[:, None]
            denom = (c * c).sum(axis=1)
            s = np.where(denom > 0, (b * c).sum(axis=1) / np.where(denom > 0, denom, 1), best_s)
            q, err = _round(b, s, z, qmax)
            better = err < best_err
            if not better.any():
                break
            best_q[better], best_s[better], best_err[better] = q[better], s[better], err[better]
            best_z = np.where(better, z, best_z)
    scales = np.where(best_s > 0, best_s, 1.0).astype(np.float32)  # an all-zero block: any scale, codes = z
    return best_q.astype(np.uint8), scales, best_z.astype(np.uint8)


def _safe(s: np.ndarray) -> np.ndarray:
    return np.where(s > 0, s, 1.0)


def _round(b: np.ndarray, s: np.ndarray, z: np.ndarray, qmax: float) -> tuple[np.ndarray, np.ndarray]:
    """Codes of b at scales s and zero points z (float arrays [m]), and each block's squared error."""
    safe = _safe(s)[:, None]
    q = np.clip(np.rint(b / safe) + z[:, None], 0, qmax)
    r = b - (q - z[:, None]) * safe
    return q, np.einsum("ij,ij->i", r, r)
