"""Positions in a growing sequence as linear forms, so `P[:, ℓ + i − 1]` can be compared with "the last token".

An inference algorithm indexes the model's output at the length of the sequence it feeds back, and
returns a slice of it. Those indices are sums of lengths, a loop counter, hyperparameters and whole
numbers; as linear forms (symbol → coefficient) two spellings of one position compare equal
(`ℓ + i − 1`, `i + ℓ − 1`, `length(x)` inside the loop), and the difference between a wrong index
and the right one can be said in words ("one position before it").

Symbols: ("len", x) the length of input x before the loop; ("i",) the loop counter; ("hp", ascii)
a size hyperparameter; ("cur", x) / ("final", x) the length of x during / after a `while` loop.
"""

from __future__ import annotations

from collections.abc import Callable

Symbol = tuple[str, ...]
Form = dict[Symbol, int]  # the key () holds the constant

CONST: Symbol = ()


def const(n: int) -> Form:
    return {CONST: n} if n else {}


def sym(*s: str, coeff: int = 1) -> Form:
    return {tuple(s): coeff}


def add(a: Form, b: Form, sign: int = 1) -> Form:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + sign * v
    return {k: v for k, v in out.items() if v}


def scale(a: Form, k: int) -> Form:
    return {s: v * k for s, v in a.items() if v * k}


def constant_of(a: Form) -> int | None:
    """The form's value if it is a plain number, else None."""
    if any(k != CONST for k in a):
        return None
    return a.get(CONST, 0)


_ORDER = {"len": 0, "cur": 0, "final": 0, "i": 1, "hp": 2}


def spell(a: Form, name: Callable[[Symbol], str]) -> str:
    """`ℓ + i − 1`, with the user's names for the symbols (as the paper writes positions)."""
    terms = sorted((k for k in a if k != CONST), key=lambda k: (_ORDER.get(k[0], 3), k))
    out = ""
    for k in terms:
        v = a[k]
        word = name(k) if abs(v) == 1 else f"{abs(v)} {name(k)}"
        out += (" − " if v < 0 else " + ") + word if out else ("−" if v < 0 else "") + word
    c = a.get(CONST, 0)
    if c or not out:
        out += (f" − {-c}" if c < 0 else f" + {c}") if out else str(c)
    return out


def offset_words(k: int) -> str:
    """How far a wrong position is from the right one: "one position before it"."""
    n = abs(k)
    count = {1: "one position", 2: "two positions"}.get(n, f"{n} positions")
    return f"{count} {'before' if k < 0 else 'after'} it"
