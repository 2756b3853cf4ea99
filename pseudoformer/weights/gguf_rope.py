"""Llama 3's RoPE scaling from a GGUF's rope_freqs tensor.

llama.cpp's converter (LlamaModel.generate_extra_tensors) does not write HF's rope_scaling
{rope_type: llama3, factor κ, low_freq_factor α, high_freq_factor β, original_max_position_embeddings ℓ_0}:
it writes the factor each frequency ω_i = b^(-2i/d) is divided by, as the tensor rope_freqs.weight:

    1                          where the wavelength 2π/ω_i < ℓ_0/β
    κ                          where it is > ℓ_0/α
    1 / ((1 - s)/κ + s),       s = (ℓ_0/λ - α)/(β - α), in between

which is what RoPE in models/variants.alg computes from (κ, ℓ_0, α, β). Those depend on ℓ_0/α and ℓ_0/β
only, and s is linear in 1/λ, so the band's points give both thresholds, and α = 1 picks ℓ_0 (Llama 3.1 and
3.2 have α = 1, so their own numbers come back). The factors the result computes are checked against the
file's; factors of another shape are refused, naming what RoPE here lacks.
"""

from __future__ import annotations

import numpy as np

# float32 factors: a thresholds' fit reproduces them to this (relative), the file's own rounding
_RTOL = 1e-5


def llama3_factors(kappa: float, ell_0: float, alpha: float, beta: float, base: float, dim: int) -> np.ndarray:
    """The factors of LlamaModel.generate_extra_tensors (HF's _compute_llama3_parameters as divisors)."""
    wavelen = 2 * np.pi * base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    s = (ell_0 / wavelen - alpha) / (beta - alpha)
    smooth = 1 / ((1 - s) / kappa + s)
    return np.where(wavelen < ell_0 / beta, 1.0, np.where(wavelen > ell_0 / alpha, kappa, smooth))


def llama3_scaling(factors: np.ndarray, base: float, dim: int) -> dict[str, object] | str:
    """HF's rope_scaling whose factors equal ``factors`` (None: all ones), or why there is none."""
    f = np.asarray(factors, np.float64)
    if f.shape != (dim // 2,) or dim < 2:
        return f"it has {f.size} factors for RoPE's {dim // 2} frequencies"
    if not np.all(np.isfinite(f)) or np.any(f < 1 - _RTOL):
        return "its factors are not all finite numbers ≥ 1"
    u = 1 / (2 * np.pi * base ** (np.arange(0, dim, 2, dtype=np.float64) / dim))  # 1/λ, falling with i
    kappa = float(f.max())
    ones = np.isclose(f, 1, rtol=_RTOL, atol=0)
    full = np.isclose(f, kappa, rtol=_RTOL, atol=0)
    if ones.all():
        return {}
    band = ~ones & ~full
    s = (1 / f - 1 / kappa) / (1 - 1 / kappa)  # 0 at κ, 1 at 1
    u_top = float(u[ones].min()) if ones.any() else float(u.max()) * 2  # lowest 1/λ left unscaled
    u_bottom = float(u[full].max())  # highest 1/λ divided by κ
    if band.sum() >= 2:  # s = (u - u_lo)/(u_hi - u_lo): a line through the band's points
        a, c = np.polyfit(u[band], s[band], 1)
        u_lo, u_hi = (-c / a, (1 - c) / a) if a > 0 else (0.0, 0.0)
    elif band.sum() == 1:  # one point (u1, s1): a line through it meeting 0 above u_bottom and 1 below u_top
        (u1,), (s1,) = u[band], s[band]
        gap = min((u1 - u_bottom) / 2, (u_top - u1) * s1 / (1 - s1) / 2)
        u_lo, u_hi = u1 - gap, u1 - gap + gap / s1
    else:  # a step from κ to 1: both thresholds in the gap
        u_lo, u_hi = u_bottom + (u_top - u_bottom) / 3, u_bottom + 2 * (u_top - u_bottom) / 3
    bands = ("its factors are not Llama 3's bands (1 for short wavelengths, κ for long ones, a smooth blend "
             "between), the one per-frequency scaling RoPE in variants.alg computes")
    if not 0 < u_lo < u_hi:
        return bands
    scaling = {"rope_type": "llama3", "factor": kappa, "low_freq_factor": 1.0,
               "high_freq_factor": float(u_hi / u_lo), "original_max_position_embeddings": float(1 / u_lo)}
    again = llama3_factors(kappa, 1 / u_lo, 1.0, u_hi / u_lo, base, dim)
    if not np.allclose(again, f, rtol=_RTOL, atol=0):
        return bands
    return scaling
