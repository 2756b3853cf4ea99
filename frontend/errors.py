"""Diagnostics: one class per kind of mistake, each rendered as `file:line:col: error: …`, the line and a caret.

Errors are collected into a `Diagnostics` and raised together as a `CompileError`, so a user
sees every independent mistake of a file in one run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Pos:
    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class AlgError(Exception):
    """A mistake in user input, reported at a source position."""

    kind = "error"

    def __init__(self, message: str, pos: Pos | None = None, source_line: str | None = None,
                 notes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos
        self.source_line = source_line
        self.notes = notes

    def render(self) -> str:
        where = f"{self.pos}: " if self.pos else ""
        out = [f"{where}error: {self.message}"]
        line = self.source_line
        if line is None and self.pos is not None:
            line = _read_line(self.pos)
        if line is not None and self.pos is not None:
            line = line.rstrip("\n")
            out.append(f"    {line}")
            # Keep tabs so the caret lines up under tab-indented text.
            pad = "".join(c if c == "\t" else " " for c in line[: max(self.pos.col - 1, 0)])
            out.append(f"    {pad}^")
        out.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(out)

    def __str__(self) -> str:
        return self.render()


class LayoutError(AlgError):
    """The line structure is wrong: indentation, missing line numbers, unclosed blocks."""


class AlgSyntaxError(AlgError):
    """A line does not parse."""


class UnknownNameError(AlgError):
    """A name, algorithm or module that is not defined."""


class ShapeError(AlgError):
    """Operands whose shapes don't fit."""


class ArityError(AlgError):
    """A call with the wrong number of arguments."""


class HyperparameterError(AlgError):
    """A hyperparameter that is missing, unknown, or has a value of the wrong kind."""


class BadTypeError(AlgError):
    """A value used as something it is not (a sequence as a matrix, a vector as a group…)."""


class DuplicateError(AlgError):
    """A name declared twice where it must be unique (two parameters that would share one weight)."""


class ModuleError(AlgError):
    """A `use` that cannot be satisfied: a missing file or an import cycle."""


class InferenceError(AlgError):
    """An inference algorithm (Algorithms 14, 15) whose loop is not the one generation runs: the wrong
    column of P, a sampled token that is not fed back, a return that is not the generated tokens."""


class UsageError(AlgError):
    """A bad command-line argument or configuration file."""


@dataclass
class Diagnostics:
    errors: list[AlgError] = field(default_factory=list)

    def add(self, err: AlgError) -> None:
        if not any(e.pos == err.pos and e.message == err.message for e in self.errors):
            self.errors.append(err)

    def raise_if_any(self) -> None:
        if self.errors:
            raise CompileError(self.errors)


class CompileError(Exception):
    """One or more user errors, rendered together."""

    def __init__(self, errors: list[AlgError]) -> None:
        # Checking every entry of a file meets a shared callee's mistake once per entry: report it once.
        unique: dict[tuple[Pos | None, str], AlgError] = {}
        for e in errors:
            unique.setdefault((e.pos, e.message), e)
        self.errors = sorted(unique.values(), key=lambda e: (e.pos.file, e.pos.line, e.pos.col) if e.pos else ("", 0, 0))
        super().__init__(self.render())

    def render(self) -> str:
        parts = [e.render() for e in self.errors]
        if len(self.errors) > 1:
            parts.append(f"{len(self.errors)} errors")
        return "\n".join(parts)


def _read_line(pos: Pos) -> str | None:
    try:
        lines = Path(pos.file).read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    return lines[pos.line - 1] if 0 < pos.line <= len(lines) else None
