"""Split a .alg file into logical lines and classify them.

The paper prints algorithms as a header, indented sections and numbered body lines, with blocks
shown by indentation (`For h ∈ [H]:`) or closed by `end`. This pass does the line-level work that
a grammar does badly (indentation, line numbers, trailing remarks) so that the Lark grammar
parses one line at a time, and a syntax error in one line does not hide errors in the next.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from pseudoformer.base.errors import Diagnostics, Pos
from pseudoformer.base.limits import MAX_INT_DIGITS
from pseudoformer.frontend.errors import LayoutError, LimitError


class Kind(Enum):
    USE = "use"
    HEADER = "header"
    SECTION = "section"
    CONTINUATION = "continuation"  # a declaration line indented under a section
    BODY = "body"  # a numbered line of the algorithm's body


@dataclass(frozen=True)
class Line:
    kind: Kind
    text: str  # the part the grammar parses
    pos: Pos  # where `text` starts
    indent: int  # leading whitespace (continuations) or the gap after the line number (body)
    number: int | None = None  # the paper's line number, for body lines
    remark: tuple[str, Pos] | None = None  # a trailing [[Name ∈ type]] remark


_BLOCK_COMMENT = re.compile(r"/\*.*?\*/")
_SECTION = re.compile(r"(Input|Output|Parameter|Hyperparameter)s?\s*:")
_NUMBERED = re.compile(r"(\d+)([ \t]+)(?=\S)")
# Brackets and ∈ in any of their spellings; a condition in an Iverson bracket never holds ∈.
_DECLARES = re.compile(r"∈|\\in\b|\bin\b|consisting")
_REMARK = re.compile(r"(\[\[|⟦|\[\\!\[)\s*([^\[\]⟦⟧]*?(∈|\\in\b|\bin\b)[^\[\]⟦⟧]*?)\s*(\]\]|⟧|\]\\!\])\s*$")


def _strip_comments(raw: str) -> str:
    # Blank out comments rather than delete them, so columns stay true.
    out = _BLOCK_COMMENT.sub(lambda m: " " * len(m.group(0)), raw)
    hash_at = out.find("#")
    return out[:hash_at] if hash_at >= 0 else out


def split_lines(source: str, file: str, diags: Diagnostics) -> list[Line]:
    lines: list[Line] = []
    in_algorithm = False
    section_indent = 0
    for lineno, raw in enumerate(source.splitlines(), start=1):
        text = _strip_comments(raw).rstrip()
        if not text.strip():
            continue
        lead = len(text) - len(text.lstrip(" \t"))
        if "\t" in text[:lead]:
            diags.add(LayoutError("indent with spaces, not tabs", Pos(file, lineno, 1), raw))
        body = text[lead:]
        pos = Pos(file, lineno, lead + 1)
        if body.startswith("Algorithm"):
            lines.append(Line(Kind.HEADER, body, pos, lead))
            in_algorithm = True
        elif body.startswith("use ") or body.startswith("use\t"):
            lines.append(Line(Kind.USE, body, pos, lead))
        elif not in_algorithm:
            diags.add(LayoutError("expected `Algorithm …:` or `use …` at the top level of a file",
                                  pos, raw))
        elif _SECTION.match(body):
            lines.append(Line(Kind.SECTION, body, pos, lead))
            section_indent = lead
        elif (m := _NUMBERED.match(body)) and len(m.group(1)) > MAX_INT_DIGITS:
            diags.add(LimitError(f"a line number of {len(m.group(1)):,} digits; at most {MAX_INT_DIGITS} are read",
                                 pos, raw))
        elif m:
            start = lead + m.end()
            stmt = text[start:]
            remark = None
            if r := _REMARK.search(stmt):
                remark = (r.group(2), Pos(file, lineno, start + r.start(2) + 1))
                stmt = stmt[: r.start()].rstrip()
            lines.append(Line(Kind.BODY, stmt, Pos(file, lineno, start + 1), len(m.group(2)),
                              number=int(m.group(1)), remark=remark))
        elif lines and lines[-1].kind in (Kind.SECTION, Kind.CONTINUATION) and lead > section_indent:
            lines.append(Line(Kind.CONTINUATION, body, pos, lead))
        else:
            # Without the indentation rule, a body line that lost its number would parse as a
            # declaration and fail with a puzzling "expected ∈".
            looks_declared = lines and lines[-1].kind in (Kind.SECTION, Kind.CONTINUATION) and _DECLARES.search(body)
            notes = ("a declaration continuing the section above is indented deeper than the section",) \
                if looks_declared else ()
            diags.add(LayoutError("a body line needs the paper's line number in front of it",
                                  pos, raw, notes))
    return lines
