"""The error function and GELU: their numerics in float64, and the ERF and GELU ops.

GELU(x) = x Φ(x) = ½x(1 + erf(x/√2)) exactly ("none"), or with Hendrycks & Gimpel's tanh
approximation ½x(1 + tanh(√(2/π)(x + 0.044715x³))) ("tanh", GPT-2's). The decomposition writes
those formulas, for backends (or ONNX opsets before 20) without a Gelu kernel.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pseudoformer.ir.ops.elementwise import unary
from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import Attr, NodeMaker, register

APPROXIMATIONS = ("none", "tanh")


# --- erf -------------------------------------------------------------------------------------
# numpy has no erf and scipy is not a dependency. These are W. J. Cody's rational Chebyshev
# approximations ("Rational Chebyshev approximations for the error function", Math. Comp. 1969),
# good to ~1e-16 relative in float64, evaluated per interval on just the elements that fall in it.
_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
      3.20937758913846947e03, 1.85777706184603153e-1)
_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
      2.84423683343917062e03)
_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
      2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
      2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)
_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
      1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
      3.43936767414372164e03, 1.23033935480374942e03)
_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
      1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)
_Q = (2.56852019228982242e00, 1.87295284992346047e00, 5.27905102951428412e-1,
      6.05183413124413191e-2, 2.33520497626869185e-3)
_SQRT_1_PI = 5.6418958354775628695e-1


def _ratio(num: tuple[float, ...], den: tuple[float, ...], t: np.ndarray) -> np.ndarray:
    """Cody's nested form: leading coefficient last in `num`, monic denominator. In place, because
    temporaries, not arithmetic, dominate the cost on large arrays."""
    k = len(den)
    xnum = num[-1] * t
    xden = t.copy()
    for i in range(k - 1):
        xnum += num[i]
        xnum *= t
        xden += den[i]
        xden *= t
    xnum += num[k - 1]
    xden += den[k - 1]
    xnum /= xden
    return xnum


def _exp_neg_sq(y: np.ndarray) -> np.ndarray:
    # exp(-y*y) with y*y split so that rounding y*y does not cost relative accuracy in the tail.
    ysq = np.trunc(y * 16.0)
    ysq /= 16.0
    out = np.exp(-ysq * ysq)
    out *= np.exp(-(y - ysq) * (y + ysq))
    return out


def _erf_parts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(small, erf on small, erfc(|x|) on the rest); NaN stays NaN."""
    y = np.abs(x)
    small = y <= 0.46875
    tail = np.full(x.shape, np.nan)
    mid = (y > 0.46875) & (y <= 4.0)
    ym = y[mid]
    tail[mid] = _exp_neg_sq(ym) * _ratio(_C, _D, ym)
    big = y > 4.0
    yb = np.minimum(y[big], 40.0)  # erfc is 0 in float64 long before 40; inf would give inf-inf
    inv = 1.0 / (yb * yb)
    r = (_SQRT_1_PI - inv * _ratio(_P, _Q, inv)) / yb
    tail[big] = _exp_neg_sq(yb) * r  # underflows to 0 by itself beyond x = 27.3
    xs = x[small]
    return small, xs * _ratio(_A, _B, xs * xs), tail


def erf(x: Any) -> np.ndarray:
    """The error function in float64, to ~1e-16 relative."""
    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(-1)  # 1-d so that masked assignment also works for 0-d arguments
    small, head, tail = _erf_parts(flat)
    out = np.copysign(1.0 - tail, flat)  # 1 - erfc(|x|) is accurate where |x| > 0.46875
    out[small] = head
    return out.reshape(x.shape)


def erfc(x: Any) -> np.ndarray:
    """The complementary error function in float64, accurate in relative terms far into the tail."""
    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(-1)
    small, head, tail = _erf_parts(flat)
    out = np.where(flat < 0, 2.0 - tail, tail)
    out[small] = 1.0 - head
    return out.reshape(x.shape)


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    """GELU in float64, rounded once to x's dtype, so the oracle is as exact as its dtype allows."""
    x64 = x.astype(np.float64)
    if approximate == "none":
        # 0.5x(1 + erf(x/sqrt2)) written with erfc, which keeps its relative accuracy for x << 0.
        y = 0.5 * x64 * erfc(-x64 / math.sqrt(2.0))
    elif approximate == "tanh":
        y = 0.5 * x64 * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x64 + 0.044715 * x64**3)))
    else:
        raise ValueError(f"unknown gelu approximation {approximate!r}")
    return y.astype(x.dtype)


def _gelu_formula(n: Any, make: NodeMaker) -> Any:
    (x,) = n.src
    dt = x.dtype

    def c(v: float) -> Any:
        return make.const(v, dt)

    if n.attrs.get("approximate", "none") == "none":
        inner = make(Op.ERF, make(Op.MUL, x, c(1 / math.sqrt(2))))
    else:
        cube = make(Op.MUL, make(Op.MUL, x, x), x)
        poly = make(Op.ADD, x, make(Op.MUL, cube, c(0.044715)))
        inner = make(Op.TANH, make(Op.MUL, poly, c(math.sqrt(2 / math.pi))))
    return make(Op.MUL, make(Op.MUL, x, c(0.5)), make(Op.ADD, inner, c(1.0)))


def _erf_vjp(n: Any, ct: Any, make: NodeMaker) -> tuple[Any]:
    (x,) = n.src
    return (make(Op.MUL, ct, make(Op.MUL, make.const(2 / math.sqrt(math.pi), x.dtype),
                                  make(Op.EXP, make(Op.NEG, make(Op.MUL, x, x))))),)


def _gelu_vjp(n: Any, ct: Any, make: NodeMaker) -> tuple[Any]:
    """GELU's own rule: Φ(x) + x φ(x) exactly; with tanh, ½(1 + t) + ½x(1 − t²)·√(2/π)(1 + 3·0.044715x²)."""
    (x,) = n.src

    def c(v: float) -> Any:
        return make.const(v, x.dtype)

    def mul(*xs: Any) -> Any:
        out = xs[0]
        for y in xs[1:]:
            out = make(Op.MUL, out, y)
        return out

    x2 = make(Op.MUL, x, x)
    if n.attrs.get("approximate", "none") == "none":
        cdf = mul(c(0.5), make(Op.ADD, c(1.0), make(Op.ERF, mul(x, c(1 / math.sqrt(2))))))
        pdf = mul(c(1 / math.sqrt(2 * math.pi)), make(Op.EXP, mul(x2, c(-0.5))))
        d = make(Op.ADD, cdf, mul(x, pdf))
    else:
        k = math.sqrt(2 / math.pi)
        t = make(Op.TANH, mul(c(k), make(Op.ADD, x, mul(c(0.044715), x2, x))))
        slope = mul(c(k), make(Op.ADD, c(1.0), mul(c(3 * 0.044715), x2)))
        d = make(Op.ADD, mul(c(0.5), make(Op.ADD, c(1.0), t)),
                 mul(c(0.5), x, make(Op.SUB, c(1.0), make(Op.MUL, t, t)), slope))
    return (make(Op.MUL, ct, d),)


register(
    unary(Op.ERF, "erf x", lambda x: erf(x).astype(x.dtype), vjp=_erf_vjp),
    unary(Op.GELU, "x Φ(x), exactly or with the tanh approximation", gelu,
          attrs=(Attr("approximate", "str", "none", APPROXIMATIONS),), decompose=_gelu_formula,
          cases=({"approximate": "none"}, {"approximate": "tanh"}), vjp=_gelu_vjp),
)
