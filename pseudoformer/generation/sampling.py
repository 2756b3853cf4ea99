"""Choosing the next token: the paper's `sample a token y from q ∝ p^{1/τ}`, greedy, top-k, top-p.

q ∝ p^{1/τ} is computed as softmax(log p / τ) in float64, which is the same distribution without
underflow when p holds tiny probabilities and τ is small. τ = 0 is the limit, greedy argmax (ties
to the lowest id, as numpy's argmax and HuggingFace's greedy search break them). A τ between 0 and
MIN_TEMPERATURE (pseudoformer/base/limits.py) is refused: sampling there is argmax up to rounding, and
at the extreme (τ = 1e-320) log p / τ overflows into NaN.

Draws use one uniform number per row from a numpy Generator, by inverse CDF, so a seed fixes every
token on every backend and the draw does not depend on how the vocabulary is ordered in memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pseudoformer.base.limits import MIN_TEMPERATURE


class SamplingError(ValueError):
    """A sampling setting that has no meaning (negative temperature, top_p outside (0, 1])."""


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0  # τ; 0 means greedy
    top_k: int | None = None  # keep the k most likely tokens of q
    top_p: float | None = None  # keep the fewest most likely tokens whose q sums to at least top_p

    def __post_init__(self) -> None:
        if not np.isfinite(self.temperature) or self.temperature < 0:
            raise SamplingError(f"temperature must be ≥ 0 (0 is greedy), got {self.temperature}")
        if 0 < self.temperature < MIN_TEMPERATURE:
            raise SamplingError(f"temperature {self.temperature:g} is below {MIN_TEMPERATURE:g}, where sampling is "
                                "greedy up to rounding: give 0 for greedy decoding")
        if self.top_k is not None and self.top_k < 1:
            raise SamplingError(f"top_k must be at least 1, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise SamplingError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def log_probabilities(scores: np.ndarray, kind: str) -> np.ndarray:
    """log p over the last axis, from logits (kind "logits") or probabilities ("probabilities")."""
    s = np.asarray(scores, dtype=np.float64)
    if kind == "probabilities":
        with np.errstate(divide="ignore"):
            return np.log(s)
    if kind != "logits":
        raise ValueError(f"scores are 'logits' or 'probabilities', not {kind!r}")
    s = s - s.max(axis=-1, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=-1, keepdims=True))


def distribution(log_p: np.ndarray, sampling: Sampling) -> np.ndarray:
    """q ∝ p^{1/τ}, then cut to top-k / top-p and renormalised; rows over the last axis."""
    if sampling.greedy:
        q = np.zeros_like(log_p)
        np.put_along_axis(q, np.argmax(log_p, axis=-1)[..., None], 1.0, axis=-1)
        return q
    z = log_p / sampling.temperature
    z = z - z.max(axis=-1, keepdims=True)
    q = np.exp(z)
    q /= q.sum(axis=-1, keepdims=True)
    if sampling.top_k is not None or sampling.top_p is not None:
        # Stable sort on -q: equal probabilities keep id order, so the cut is deterministic.
        order = np.argsort(-q, axis=-1, kind="stable")
        ranked = np.take_along_axis(q, order, axis=-1)
        keep = np.ones_like(ranked, dtype=bool)
        if sampling.top_k is not None:
            keep[..., sampling.top_k:] = False
        if sampling.top_p is not None:
            # Keep a token if the mass before it is below top_p: the first token always stays.
            before = np.cumsum(ranked, axis=-1) - ranked
            keep &= before < sampling.top_p
        mask = np.zeros_like(keep)
        np.put_along_axis(mask, order, keep, axis=-1)
        q = np.where(mask, q, 0.0)
        q /= q.sum(axis=-1, keepdims=True)
    return q


def sample(log_p: np.ndarray, sampling: Sampling, rng: np.random.Generator) -> np.ndarray:
    """One token id per row of log_p [batch, vocab] (int64 [batch])."""
    if sampling.greedy:
        return np.argmax(log_p, axis=-1).astype(np.int64)
    q = distribution(log_p, sampling)
    cdf = np.cumsum(q, axis=-1)
    u = rng.random(q.shape[:-1])[..., None] * cdf[..., -1:]
    ids = (cdf <= u).sum(axis=-1)  # the first id whose cumulative mass exceeds u
    return np.minimum(ids, q.shape[-1] - 1).astype(np.int64)
