"""The errors every stage shares: a user's mistake at a source position, and the collection of them.

Each stage (frontend, passes, backends, the API) imports its base classes from here, so that no stage
imports a later or an earlier one just to raise an error. Stage-specific kinds of mistake subclass
AlgError in their own stage (frontend/errors.py, passes/kv_cache.py).

Every user error is rendered as `file:line:col: error: …`, the line and a caret; errors are collected
into a `Diagnostics` and raised together as a `CompileError`, so a user sees every independent
mistake of a file in one run.
"""


from __future__ import annotations

import os
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from pseudoformer.base.limits import FILE_CAPS
from pseudoformer.base.regular_file import open_regular, read_at_most
from pseudoformer.base.terminal import escape


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
        # Every part may hold input text (a tensor name, a config key, a source line): each is escaped
        # for the terminal (terminal.py), so none can forge a line, move the cursor or retitle the window.
        where = f"{escape(str(self.pos))}: " if self.pos else ""
        out = [f"{where}{self.kind}: {_message_lines(self.message)}"]
        line = self.source_line
        if line is None and self.pos is not None:
            line = _read_line(self.pos)
        if line is not None and self.pos is not None:
            line = line.rstrip("\n")
            out.append(f"    {escape(line, keep=chr(9))}")
            # Keep tabs so the caret lines up under tab-indented text; an escape is as wide as it prints.
            prefix = escape(line[: max(self.pos.col - 1, 0)], keep="\t")
            pad = "".join(c if c == "\t" else " " for c in prefix)
            out.append(f"    {pad}^")
        out.extend(f"  note: {_message_lines(n)}" for n in self.notes)
        return "\n".join(out)

    def __str__(self) -> str:
        return self.render()


def _message_lines(message: str) -> str:
    """A message escaped for the terminal. A message may list things a line each (the tensors that do not
    fit); its lines stay lines, but every line after the first is indented, so that no newline in a name
    it quotes can start a line that reads as a diagnostic of its own (`error: …`, `FILE:1:1: error: …`)."""
    first, *rest = escape(message, keep="\n").split("\n")
    return "\n".join([first, *(line if line[:1] in (" ", "\t") else "  " + line for line in rest)])


class UsageError(AlgError):
    """A bad command-line argument or configuration file."""


class Note(AlgError):
    """Not a mistake: something the compiler did not do at a source position, and why (a refused fusion)."""

    kind = "note"


class BackendError(Exception):
    """A model that cannot be lowered, compiled, saved or run as asked; the message says what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


@dataclass
class Diagnostics:
    errors: list[AlgError] = field(default_factory=list)

    def add(self, err: AlgError) -> None:
        if not any(e.pos == err.pos and e.message == err.message for e in self.errors):
            self.errors.append(err)

    def raise_if_any(self) -> None:
        if self.errors:
            raise CompileError(self.errors)


MAX_SHOWN = 20  # diagnostics a CompileError prints


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
        # A mistake repeated down a file (a thousand algorithms of one name, three hundred nested loops) is shown
        # MAX_SHOWN times, not a screen per line: the first are where to start, the count says how many.
        parts = [e.render() for e in self.errors[:MAX_SHOWN]]
        if len(self.errors) > MAX_SHOWN:
            parts.append(f"… and {len(self.errors) - MAX_SHOWN} more, not shown")
        if len(self.errors) > 1:
            parts.append(f"{len(self.errors)} errors")
        return "\n".join(parts)


def _read_line(pos: Pos) -> str | None:
    """The source line at `pos`, from a .alg file only: a diagnostic never quotes another kind of file."""
    if Path(pos.file).suffix != ".alg":
        return None
    try:
        fd, _ = open_regular(pos.file)
        assert fd is not None
        try:
            data = read_at_most(fd, FILE_CAPS["source"])
        finally:
            os.close(fd)
        # Lines end at \n (or \r\n) only, as the frontend counts them (frontend/source_text.py).
        # and in the composed form the frontend reads (NFC), so a caret falls where the column says
        lines = unicodedata.normalize("NFC", data.decode("utf-8-sig").replace("\r\n", "\n")).split("\n")
    except (OSError, UnicodeDecodeError):
        return None
    return lines[pos.line - 1] if 0 < pos.line <= len(lines) else None


class ContribFallbackWarning(UserWarning):
    """--contrib-ops: attention that onnxruntime's GroupQueryAttention cannot compute stays standard ONNX
    (deploy.say_contrib_fallback); the command line prints it as one note."""
