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

    @staticmethod
    def parse(text: str) -> Size:
        """The Size whose `str` is `text`, an IR dim: `H·?d_mid#6`, `2·d + 1`. Names that are formulas
        (`floor(ell/2)`, `(d) mod 2`) stay whole: only `·` and ` + ` outside parentheses split."""
        out = Size.of(0)
        for term in _split_top(text, " + "):
            factors = _split_top(term, "·")
            t = Size.of(int(factors[0])) if re.fullmatch(r"-?[0-9]+", factors[0]) else Size.of(factors[0])
            for f in factors[1:]:
                t = t * Size.of(f)
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


def _split_top(text: str, sep: str) -> list[str]:
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    return [*parts, text[start:]]


def rounded(op: str, num: Size, den: Size) -> Size | None:
    """⌊num/den⌋ (op "floor"), ⌈num/den⌉ ("ceil") or num mod den ("mod") as a size: of whole numbers, or
    where the division is exact; None when a polynomial cannot say it (⌊ℓ/2⌋). den is not 0."""
    if num.is_int and den.is_int:
        a, b = num.value, den.value
        return Size.of(a // b if op == "floor" else -(-a // b) if op == "ceil" else a % b)
    exact = num.div(den)
    if op == "mod":
        return Size.of(0) if exact is not None else None
    if exact is not None:
        return exact
    if op == "ceil" and num == Size.of(1):
        return Size.of(1)  # ⌈1/G⌉ = 1 for any size G ≥ 1 (checking without a config unrolls h = 1)
    return None


def formula(op: str, num: Size, den: Size) -> Size:
    """A size of its own named by its formula, `floor(ell/2)`, for what `rounded` cannot say: the same
    formula written in a type and in an expression is the same size."""
    shown = [f"({x})" if len(x.terms) > 1 else str(x) for x in (num, den)]
    if op == "mod":
        return Size.of(f"{shown[0]} mod {shown[1]}")
    return Size.of(f"{op}({shown[0]}/{shown[1]})")


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
