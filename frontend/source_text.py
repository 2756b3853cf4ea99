"""Source text that displays differently from what compiles is refused before it is parsed.

The Trojan Source class (CVE-2021-42574), refused as rustc refuses it:

* **Line breaks.** A line ends at `\\n` or `\\r\\n`, as in every editor. A form feed, a vertical tab,
  a lone `\\r`, the file/group/record separators (U+001C–U+001E), U+0085, U+2028 and U+2029 end a
  line for Python's `str.splitlines` but for no editor, so code after a `#` comment would run
  while an editor shows it as part of the comment. Each is a diagnostic at its place.
* **Bidi controls** (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C) reorder what an editor
  shows. rustc refuses them in comments and literals by default; here they are refused anywhere,
  comments included.
* **Math-alphabet twins.** `W` and `𝒲` are distinct Unicode names, but their ASCII spelling — the
  parameter names checkpoints are loaded by (docs/language.md §6) — is the same `W`, and a reader
  can take one for the other. Two names of one file that differ only by a mathematical
  alphanumeric style (U+1D400–U+1D7FF; `𝒲`, `𝐖`, `𝕎` against `W`) are refused as confusable, at the
  second one, as rustc's `confusable_idents` lint flags them. A group's label (`𝒲 consisting of:`)
  is exempt: it is no parameter, and its members carry the ASCII names.

* **Two encodings of one letter.** `ẑ` may be written as one character (U+1E91) or as `z` and a
  combining circumflex (U+0302); an editor shows both alike, and a parser reading code points would
  take them for two names, so `ẑ ← x` could hide behind a `return y = ẑ` that reads another. The text
  is put in Unicode's composed form (NFC) first, as Python puts identifiers in a normal form (PEP 3131):
  both spellings are then one name. (Only such a pair changes, and only where a file mixes them: the
  columns of a line are its composed form's.)

check_source_text returns the text with each refused character replaced by a space (so columns and
line numbers stay those of the file, and later stages do not trip over it) and the diagnostics.
"""

from __future__ import annotations

import re
import unicodedata

from pseudoformer.base.errors import AlgError, Pos
from pseudoformer.base.terminal import BIDI_CONTROLS
from pseudoformer.frontend.errors import LayoutError

LINE_BREAKS = {"\r": "a carriage return not followed by a line feed", "\x0b": "a vertical tab",
               "\x0c": "a form feed", "\x1c": "a file separator (U+001C)", "\x1d": "a group separator (U+001D)",
               "\x1e": "a record separator (U+001E)", "\x85": "a next-line character (U+0085)",
               "\u2028": "a line separator (U+2028)", "\u2029": "a paragraph separator (U+2029)"}
_REFUSED = re.compile("[" + "".join(LINE_BREAKS) + "".join(BIDI_CONTROLS) + "]")
# A whole name with its scripts (`W^h_q`, `γ¹_l`, `W^{e/d}_l`), as the names of frontend/names.py are written.
_NAME = re.compile(r"[^\W\d]\w*+(?:[_^]\{[^{}\s]*\}|[_^]\w++)*+['′]*+")  # possessive: linear on any line
_LABEL = re.compile(r"(?<=\s)consisting\s++of\b")
_MATH_ALPHABET = re.compile("[\U0001d400-\U0001d7ff]")


def _what(ch: str) -> str:
    if ch in LINE_BREAKS:
        return (f"{LINE_BREAKS[ch]}, which ends a line for some readers and not for others; a line ends "
                "at \\n or \\r\\n")
    name = unicodedata.name(ch, f"U+{ord(ch):04X}")
    return (f"the bidirectional control character U+{ord(ch):04X} ({name}), which makes an editor show the "
            "text in another order than it is read (Trojan Source, CVE-2021-42574); it is refused anywhere, "
            "comments included")


def check_source_text(text: str, file: str) -> tuple[str, list[AlgError]]:
    """`text` with refused characters blanked, and a located diagnostic for each (see the module's doc)."""
    errors: list[AlgError] = []
    text = text.replace("\r\n", "\n")
    if not unicodedata.is_normalized("NFC", text):
        text = unicodedata.normalize("NFC", text)
    if _REFUSED.search(text):
        lines = text.split("\n")
        for i, line in enumerate(lines):
            for m in _REFUSED.finditer(line):
                errors.append(LayoutError(_what(m.group()), Pos(file, i + 1, m.start() + 1), line))
            lines[i] = _REFUSED.sub(" ", line)
        text = "\n".join(lines)
    if _MATH_ALPHABET.search(text):
        errors.extend(_confusables(text, file))
    return text, errors


def _code(line: str) -> str:
    """The line without its comments (blanked, so columns stay), as frontend/layout.py strips them."""
    line = re.sub(r"/\*.*?\*/", lambda m: " " * len(m.group()), line)
    hash_at = line.find("#")
    return line[:hash_at] if hash_at >= 0 else line


def _plain(name: str) -> str:
    return _MATH_ALPHABET.sub(lambda m: unicodedata.normalize("NFKC", m.group()), name)


def _confusables(text: str, file: str) -> list[AlgError]:
    first: dict[str, tuple[str, int]] = {}  # plain spelling → (a name as written, its line)
    errors: list[AlgError] = []
    reported: set[tuple[str, str]] = set()
    code = [_code(line) for line in text.split("\n")]
    # A group's label (`𝒲 consisting of:`) is no parameter and has no ASCII name of its own (its members
    # have), so the paper's `𝒲` beside a member `W` makes no two parameters one.
    labels = {before[-1] for line in code for m in _LABEL.finditer(line)
              if (before := line[:m.start()].split())}
    for i, line in enumerate(text.split("\n"), start=1):
        for m in _NAME.finditer(code[i - 1]):
            name, plain = m.group(), _plain(m.group())
            if name in labels:
                continue
            seen = first.setdefault(plain, (name, i))
            if seen[0] != name and (seen[0], name) not in reported:
                reported.add((seen[0], name))
                errors.append(LayoutError(
                    f"`{name}` and `{seen[0]}` (line {seen[1]}) differ only by a mathematical letter style, and "
                    f"both are spelled `{plain}` in ASCII, as parameter names are; rename one of them",
                    Pos(file, i, m.start() + 1), line))
    return errors
