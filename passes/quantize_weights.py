"""Choosing the codes, scales and zero points of block-quantized weights, in numpy, at compile time.

Three methods, none needing calibration data:

  rtn       round to nearest over each block's range: asymmetric [min(w, 0), max(w, 0)] onto
            0 … 2^b − 1; symmetric, the weight of largest magnitude onto code 0 (onnxruntime's rule).
  mse       per block, the clipping of that range that minimises the block's squared error: the range
            is shrunk by each factor of a grid (a block's extreme weights are rare; giving them up buys
            a finer step for all the others; symmetric blocks also try ±7 steps around zero), the best
            kept, then its scale refitted by least squares for its codes (s = Σ w·(q − z) / Σ (q − z)²)
            and its zero point moved a step either way, while that helps.
  balanced  (the default) mse, then the block's errors made to sum to nearly zero by moving the
            cheapest codes a step (_Best.balance): what a block leaves in x · w is Σ e_k x_k, which
            for inputs with a mean (after GELU) is mostly that sum.

See docs/quantization.md for the measurements that chose the default.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from pseudoformer.ir.ops.quantized import default_zero_point, k_blocks, pack

METHODS = ("balanced", "mse", "rtn")
# Shrink factors of the range tried by `mse`; 1.0 is round to nearest.
_GRID = np.linspace(1.0, 0.6, 11, dtype=np.float32)
_REFITS = 3
# Weights quantized at a time: each block goes through ~20 passes of a few numpy operations, and a
# chunk whose temporaries stay in the CPU's caches (256 KB of float32) runs 2.3× faster than 16 MB ones.
_CHUNK = 1 << 16
_WORKERS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@dataclass(frozen=True)
class Quantized:
    packed: np.ndarray  # uint8 [N, k_blocks, block_size · bits / 8]
    scales: np.ndarray  # float32 [N, k_blocks]
    zero_points: np.ndarray | None  # uint8 packed [N, ⌈k_blocks · bits / 8⌉], None when symmetric


def quantize(w: np.ndarray, *, bits: int, block_size: int, symmetric: bool, method: str = "balanced") -> Quantized:
    """W [N, K] (N outputs, blocks along K; any strides) → its packed codes, scales and zero points."""
    if method not in METHODS:
        raise ValueError(f"unknown quantization method {method!r} (choose {', '.join(METHODS)})")
    n, k = w.shape
    kb = k_blocks(k, block_size)
    # The outputs are filled a chunk of rows at a time (pack works row by row), so nothing of W's size is
    # held but them: a full array of codes (a byte a weight) and pack's temporaries came to 0.67× the
    # float32 matrix, 1.06 GB for Llama-3.2-3B's tied embedding, on top of the matrix itself.
    packed = np.empty((n, kb, block_size * bits // 8), np.uint8)
    scales = np.empty((n, kb), np.float32)
    zps = None if symmetric else np.empty((n, -(-kb * bits // 8)), np.uint8)
    rows = max(1, _CHUNK // (kb * block_size))  # rows of W at a time: `w` may be a view (transposed), never copied whole

    def chunk(start: int) -> None:
        part = w[start:start + rows]
        m = len(part)
        padded = np.zeros((m, kb * block_size), np.float32)
        padded[:, :k] = part  # zeros: exactly representable, so the padding adds no error and moves no range
        codes, s, zeros = _blocks(padded.reshape(-1, block_size), bits, symmetric, method)
        out = slice(start, start + m)
        scales[out] = s.reshape(m, kb)
        packed[out], zp = pack(codes.reshape(m, kb, block_size), None if symmetric else zeros.reshape(m, kb), k, bits)
        if zps is not None:
            zps[out] = zp

    starts = range(0, n, rows)
    if len(starts) == 1 or _WORKERS == 1:
        for start in starts:
            chunk(start)
    else:
        # numpy's loops release the GIL: chunks quantize in parallel, each writing its own rows
        with ThreadPoolExecutor(min(_WORKERS, len(starts))) as pool:
            list(pool.map(chunk, starts))
    return Quantized(packed, scales, zps)


def _blocks(b: np.ndarray, bits: int, symmetric: bool, method: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codes [m, bs], scales [m] and zero points [m] of m blocks."""
    qmax = float((1 << bits) - 1)
    half = float(default_zero_point(bits))
    if symmetric:
        # The weight of largest magnitude onto the code 0, ±8·s at 4 bits (a negative scale when it is
        # positive): its side of zero gets the extra level, as onnxruntime's MLAS quantizer does it.
        extreme = b[np.arange(len(b)), np.abs(b).argmax(axis=1)]
        z = np.full(len(b), half, np.float32)
        shapes = [(extreme / -half, z), (np.abs(extreme) / (half - 1), z)]  # …, or ±7·s both sides
    else:
        lo, hi = np.minimum(b.min(axis=1), 0), np.maximum(b.max(axis=1), 0)
        shapes = [((hi - lo) / qmax, None)]
    best = _Best(b, qmax)
    for s0, z0 in (shapes if method != "rtn" else shapes[:1]):
        for alpha in (_GRID if method != "rtn" else _GRID[:1]):
            s = s0 * alpha
            z = z0 if z0 is not None else np.clip(np.rint(-lo * alpha / _safe(s)), 0, qmax)
            best.offer(s, z)
    if method != "rtn":
        # A block none of whose offers won this round would get the very same offers next round (each
        # block's arithmetic is its own), so only the blocks that improved go on: the same result, and
        # the later rounds, where most blocks have settled, cost a fraction of the first.
        part, rows = best, np.arange(len(b))
        for round_ in range(_REFITS):
            improved = part.offer(part.refit(part.centred(part.s, part.z)), part.z)
            for dz in ((-1.0, 1.0) if not symmetric else ()):  # the zero point one step either way
                z = np.clip(part.z + dz, 0, qmax)
                improved |= part.offer(part.refit(part.centred(part.s, z)), z)
            if part is not best:
                best.put(rows, part)
            if not improved.any() or round_ + 1 == _REFITS:
                break
            keep = np.flatnonzero(improved)
            part, rows = part.take(keep), rows[keep]
    if method == "balanced":
        best.balance()
    scales = np.where(best.s != 0, best.s, 1.0).astype(np.float32)  # an all-zero block: any scale, codes = z
    return best.q.astype(np.uint8), scales, best.z.astype(np.uint8)


class _Best:
    """Per block, the scale and zero point with the least squared error offered so far, and its codes."""

    def __init__(self, b: np.ndarray, qmax: float) -> None:
        self.b, self.qmax = b, qmax
        self._q: np.ndarray | None = None  # the best's codes; None: not yet made for the latest (s, z)
        self.s: np.ndarray = np.empty(0)
        self.z: np.ndarray = np.empty(0)
        self.err: np.ndarray | None = None

    @property
    def q(self) -> np.ndarray:
        # Made when asked for, not copied in at every offer that wins: codes(s, z) is elementwise per
        # block, so remaking them from the kept (s, z) gives the very codes that offer computed.
        if self._q is None:
            self._q = self.codes(self.s, self.z)
        return self._q

    @q.setter
    def q(self, value: np.ndarray) -> None:
        self._q = value

    def codes(self, s: np.ndarray, z: np.ndarray) -> np.ndarray:
        # in place, one temporary: the same values as np.clip(np.rint(b / s) + z, 0, qmax)
        q = np.divide(self.b, _safe(s)[:, None])
        np.rint(q, out=q)
        q += z[:, None]
        return np.clip(q, 0, self.qmax, out=q)

    def centred(self, s: np.ndarray, z: np.ndarray) -> np.ndarray:
        """The codes less their zero points, c = q − z, in place: clip(rint(b / s) + z, 0, qmax) − z is
        rint(b / s) clipped to [−z, qmax − z] (small integers, exact; past ±2^24 both clip alike)."""
        c = np.divide(self.b, _safe(s)[:, None])
        np.rint(c, out=c)
        # a maximum and a minimum, where numpy's clip with per-block bounds costs 6× a scalar clip
        np.maximum(c, -z[:, None], out=c)
        return np.minimum(c, (self.qmax - z)[:, None], out=c)

    def offer(self, s: np.ndarray, z: np.ndarray) -> np.ndarray:
        """Keep (s, z) for the blocks where it has less error than their best; which blocks those are."""
        r = self.centred(s, z)
        r *= _safe(s)[:, None]
        np.subtract(self.b, r, out=r)
        err = np.einsum("ij,ij->i", r, r)
        if self.err is None:
            self._q, self.s, self.z, self.err = None, s.copy(), z.copy(), err
            return np.ones(len(err), bool)
        better = err < self.err
        if not better.any():
            return better
        self._q = None
        for mine, new in ((self.s, s), (self.z, z), (self.err, err)):
            np.copyto(mine, new, where=better)
        return better

    def take(self, rows: np.ndarray) -> _Best:
        """These blocks alone, their best so far with them (the codes are remade from s, z when needed)."""
        part = _Best(self.b[rows], self.qmax)
        part.s, part.z = self.s[rows], self.z[rows]
        part.err = None if self.err is None else self.err[rows]
        return part

    def put(self, rows: np.ndarray, part: _Best) -> None:
        """Write back the best of blocks `rows`, taken with take and offered more since."""
        self._q = None
        self.s[rows], self.z[rows] = part.s, part.z
        if self.err is not None and part.err is not None:
            self.err[rows] = part.err

    def balance(self) -> None:
        """Move the fewest, cheapest codes one step so that each block's errors sum to at most s/2.

        The error a block leaves in x · w is Σ e_k x_k. For inputs centred on zero only Σ e_k² counts,
        but for inputs with a mean μ (after a GELU, a ReLU, a norm with a shift) so does μ · Σ e_k, and
        rounding each weight to its nearest code leaves Σ e_k a random walk of √block_size steps.
        Moving code k by one step toward the sum's sign changes it by one s and costs s² − 2|s e_k|
        more squared error: the cheapest are the weights rounded from near a midpoint."""
        s = self.s[:, None]
        e = self.b - (self.q - self.z[:, None]) * s
        steps = e.sum(axis=1) / _safe(self.s)
        d = np.sign(steps)[:, None]  # the direction codes move in (a code up is +s)
        moved = self.q + d
        cost = np.where((moved >= 0) & (moved <= self.qmax), s * s - 2 * d * s * e, np.inf)
        order = np.argsort(cost, axis=1)
        # the first rint(|steps|) codes of each block's order move: marked through `order` itself, a few a
        # block, rather than ranking all of them (the inverse permutation) and comparing every rank
        block, place = np.nonzero(np.arange(order.shape[1]) < np.rint(np.abs(steps))[:, None])
        move = np.zeros(order.shape, bool)
        move[block, order[block, place]] = True
        self.q = np.where(move & np.isfinite(cost), moved, self.q)

    def refit(self, c: np.ndarray) -> np.ndarray:
        """The least-squares scale of centred codes c = q − z: Σ w·c / Σ c² (the best's scale where c is 0)."""
        # Σ c² sums small integers (|c| ≤ 2^b − 1), exact in float32 in any order: einsum's order, faster
        # than a reduction along the short last axis, gives the same value. Σ w·c is rounded: its order stays.
        denom = np.einsum("ij,ij->i", c, c)
        return np.where(denom > 0, (self.b * c).sum(axis=1) / np.where(denom > 0, denom, 1), self.s)


def _safe(s: np.ndarray) -> np.ndarray:
    return np.where(s != 0, s, 1.0)


