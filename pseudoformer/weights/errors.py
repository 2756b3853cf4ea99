"""The one exception this package raises, and the problem records it is built from.

A checkpoint that does not fit usually does not fit in many places at once (a wrong layer count
leaves dozens of names missing), so problems are collected and reported together: fixing them
one exception at a time would be a miserable loop for the user.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# Summary order: what the user most likely has to act on first.
KINDS = ("missing", "unexpected", "mis-shaped", "unknown", "untied", "invalid")


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with one tensor. Sorts by name so a report reads like the parameter list."""

    name: str
    kind: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown problem kind {self.kind!r}; expected one of {KINDS}")

    def __str__(self) -> str:
        return f"{self.name}: {self.kind}" + (f", {self.detail}" if self.detail else "")


def fmt_shape(shape: Iterable[int]) -> str:
    """``(32, 101)``, ``(32,)``: Python's tuple notation, whatever sequence type came in."""
    return str(tuple(int(d) for d in shape))


class WeightsError(Exception):
    """Weights could not be read, or do not fit the model.

    ``problems`` holds one line per offending tensor or setting (possibly empty when the error is a
    single fact such as "this file is a pickle"); ``str()`` is the summary followed by those lines.
    """

    def __init__(self, summary: str, problems: Iterable[str | Problem] = ()) -> None:
        lines = [str(p) for p in problems]
        # Both in args so the exception survives pickling (e.g. across multiprocessing).
        super().__init__(summary, lines)
        self.summary = summary
        self.problems: list[str] = lines

    def __str__(self) -> str:
        return "\n".join([self.summary, *("  " + p for p in self.problems)])

    @classmethod
    def misfit(cls, source: str | Path, problems: Iterable[Problem]) -> WeightsError:
        """``weights 'SRC' do not fit the model: 2 missing, 1 mis-shaped`` + sorted problem lines."""
        ps = sorted(set(problems))
        counts = Counter(p.kind for p in ps)
        tally = ", ".join(f"{counts[k]} {k}" for k in KINDS if counts[k])
        return cls(f"weights '{source}' do not fit the model: {tally}", ps)
