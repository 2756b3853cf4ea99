"""Text from untrusted input made safe to print on a terminal: the one escape every printer uses.

Tensor names from a safetensors header, config keys, source lines, paths and decoded tokens reach
stderr and stdout inside pseudoformer's messages. Printed raw, an ESC or OSC sequence in one of them
could retitle or clear the terminal, a carriage return could overwrite what came before it on the
line, a bidi control could reorder it, and a newline could forge a second `error:` line. `escape`
writes each such character as a visible escape (`\\x1b`, `\\u202e`, `\\x0a`), so what is printed is
what the input held, one line per line pseudoformer meant (errors.py keeps the newlines of a
diagnostic's message and indents its continuation lines instead, so that none reads as a diagnostic
of its own).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import unicodedata
from collections.abc import Iterator

# Bidi embeddings, overrides and isolates, and the marks (Trojan Source, CVE-2021-42574).
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# What ends a line for some reader (an editor, a terminal, str.splitlines) other than \n and \r\n.
LINE_BREAKS = frozenset("\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def _unsafe(ch: str) -> bool:
    if ch in BIDI_CONTROLS or ch in LINE_BREAKS:
        return True
    # Cc: C0 and C1 controls (ESC, BEL, backspace, CSI); Cf is left alone but for bidi (a ZWJ in an emoji
    # is harmless); Cs: a lone surrogate, which cannot be written as UTF-8 at all.
    return unicodedata.category(ch) in ("Cc", "Cs")


def _show(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


_ANY_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff]")


def escape(text: str, *, keep: str = "") -> str:
    """`text` with every control, bidi and line-breaking character written as an escape, except those in `keep`
    (a source line keeps its tabs, so a caret lines up under it)."""
    if not _ANY_UNSAFE.search(text):
        return text
    return "".join(_show(c) if c not in keep and _unsafe(c) else c for c in text)


def escape_lines(text: str) -> str:
    """A message of several lines that pseudoformer composed: each line escaped, the \\n between them kept."""
    return "\n".join(escape(line, keep="\t") for line in text.split("\n"))


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Silence what native code writes straight to file descriptor 2 (a Rust panic's message and
    backtrace, TVM's C++ log lines): raw and unescaped, it would bypass `escape`. Errors still arrive
    as Python exceptions, and are printed escaped."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
