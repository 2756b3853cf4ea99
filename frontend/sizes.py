"""Symbolic sizes: polynomials over size names, so `H d_mid` and `d_mid H` are the same size.

With a config every hyperparameter is an int and sizes fold to ints; without one (`pseudoformer
check`) they stay symbolic. Names that start with "?" are unknowns: sizes an algorithm leaves
implicit (MHAttention's d_out) that unification with another size fixes later.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

Monomial = tuple[str, ...]  # sorted factor names, () for the constant term


@dataclass(frozen=True)
class Size:
    terms: tuple[tuple[Monomial, int], ...]  # sorted, no zero coefficients

    @staticmethod
    def of(v: int | str | Size) -> Size:
        if isinstance(v, Size):
            return v
        if isinstance(v, int):
            return Size((((), v),) if v else ())
        return Size((((v,), 1),))

    def _d(self) -> dict[Monomial, int]:
        return dict(self.terms)

    @staticmethod
    def _mk(d: Mapping[Monomial, int]) -> Size:
        return Size(tuple(sorted((m, c) for m, c in d.items() if c)))

    def __add__(self, o: Size | int) -> Size:
        d = self._d()
        for m, c in Size.of(o).terms:
            d[m] = d.get(m, 0) + c
        return Size._mk(d)

    def __sub__(self, o: Size | int) -> Size:
        return self + Size.of(o) * -1

    def __mul__(self, o: Size | int) -> Size:
        d: dict[Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in Size.of(o).terms:
                m = tuple(sorted(m1 + m2))
                d[m] = d.get(m, 0) + c1 * c2
        return Size._mk(d)

    def div(self, o: Size) -> Size | None:
        """Exact division by a monomial; None when it does not divide."""
        if len(o.terms) != 1:
            return None
        (mo, co), = o.terms
        d: dict[Monomial, int] = {}
        for m, c in self.terms:
            rest = list(m)
            for f in mo:
                if f not in rest:
                    return None
                rest.remove(f)
            if c % co:
                return None
            d[tuple(rest)] = c // co
        return Size._mk(d)

    @property
    def is_int(self) -> bool:
        return all(m == () for m, _ in self.terms)

    @property
    def value(self) -> int:
        assert self.is_int
        return self.terms[0][1] if self.terms else 0

    def names(self) -> set[str]:
        return {f for m, _ in self.terms for f in m}

    @property
    def unknowns(self) -> set[str]:
        return {n for n in self.names() if n.startswith("?")}

    def subst(self, env: Mapping[str, Size]) -> Size:
        out = Size.of(0)
        for m, c in self.terms:
            t = Size.of(c)
            for f in m:
                t = t * env.get(f, Size.of(f))
            out = out + t
        return out

    def dim(self) -> int | str:
        """The IR dim: an int, or a canonical string for a symbolic size."""
        return self.value if self.is_int else str(self)

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for m, c in self.terms:
            body = "·".join(m)
            if not m:
                parts.append(str(c))
            elif c == 1:
                parts.append(body)
            else:
                parts.append(f"{c}·{body}")
        return " + ".join(parts)


ONE = Size.of(1)
# The `1` of `1ᵀ`: a row of ones as long as whatever it meets.
BROADCAST = Size.of("*")


def quotient(x: Size, k: int | Size) -> Size:
    """x/k where k does not divide x, checking without a config: a size of its own (`d/2`, `H/H_kv`),
    which `simplify` turns back into x when multiplied by a whole k."""
    def term(s: Size) -> str:
        return str(s) if len(s.terms) == 1 and s.terms[0][1] == 1 and len(s.terms[0][0]) == 1 else f"({s})"
    return Size.of(f"{term(x)}/{k if isinstance(k, int) else term(k)}")


_QUOTIENT = re.compile(r"([^/()]+)/([0-9]+)")


def simplify(s: Size) -> Size:
    """k·(d/k) = d for the quotient sizes of `quotient` (2·d/2 is d)."""
    out = Size.of(0)
    for mono, c in s.terms:
        term = Size.of(c)
        for name in mono:
            m = _QUOTIENT.fullmatch(name)
            k = int(m.group(2)) if m else 0
            if m and k and term.is_int and term.value % k == 0:
                term = Size.of(term.value // k) * Size.of(m.group(1))
            else:
                term = term * Size.of(name)
        out = out + term
    return out
