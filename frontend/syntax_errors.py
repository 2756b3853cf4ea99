"""A parse error as the user should read it: where the line went wrong and how the notation writes it.

Lark reports the token it stopped at and the grammar's expected tokens, which read as its internals;
these turn that into one located message that says what to write instead.
"""

from __future__ import annotations

import re

from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from pseudoformer.base.errors import Pos
from pseudoformer.frontend.errors import AlgSyntaxError
from pseudoformer.frontend.layout import Kind, Line


def at_offset(line: Line, offset: int) -> Pos:
    """The position `offset` characters into the line."""
    return Pos(line.pos.file, line.pos.line, line.pos.col + offset)


def syntax_error(e: UnexpectedInput, line: Line) -> AlgSyntaxError:
    col = getattr(e, "column", 1)
    pos = Pos(line.pos.file, line.pos.line, line.pos.col + (col - 1 if isinstance(col, int) and col > 0 else 0))
    if (hint := _operator_hint(line.text, getattr(e, "pos_in_stream", None))) is not None:
        return AlgSyntaxError(hint[0], at_offset(line, hint[1]))
    if (at := _map_hint(line.text, getattr(e, "pos_in_stream", None))) is not None:
        if isinstance(e, UnexpectedEOF) or (isinstance(e, UnexpectedToken) and e.token.type == "$END"):
            return AlgSyntaxError("this line ends too early: a block loop is written `For h ∈ [H]:` with its body "
                                  "indented below, a map `for t ∈ [ℓ] : …` with its statement after the `:`",
                                  at_offset(line, len(line.text.rstrip())))
        return AlgSyntaxError("maps over several indices are written `for i ∈ [d], t ∈ [ℓ] : …` (ASCII "
                              "`for i in [d], t in [ell] : …`): each index with its range, separated by commas, "
                              "then `:` and the statement on the same line", at_offset(line, at))
    if isinstance(e, UnexpectedCharacters):
        ch = line.text[e.pos_in_stream] if e.pos_in_stream < len(line.text) else "?"
        msg = f"unexpected character {ch!r}"
    elif isinstance(e, UnexpectedEOF) or (isinstance(e, UnexpectedToken) and e.token.type == "$END"):
        pos = Pos(line.pos.file, line.pos.line, line.pos.col + len(line.text))
        msg = "this line ends too early"
    elif isinstance(e, UnexpectedToken):
        msg = f"unexpected {e.token.value!r}"
    else:
        msg = "syntax error"
    if (opened := _unclosed_paren(line.text, getattr(e, "pos_in_stream", None), getattr(e, "expected", ()))) \
            is not None:
        return AlgSyntaxError(f"{msg}: the '(' at column {line.pos.col + opened} is not closed; a parenthesised "
                              "expression or condition ends with ')', as in [[(t ≤ t') ∧ ¬(t' − t < w)]]", pos)
    # What the line should look like, rather than the grammar's tokens (which read as its internals).
    if isinstance(e, UnexpectedToken) and e.token.value == ";":
        return AlgSyntaxError(f"{msg}: ';' does not separate declarations or statements in the notation; "
                              "put each on a line of its own", pos)
    return AlgSyntaxError(f"{msg}: {_FORMS[line.kind]}", pos)


_FORMS = {
    Kind.HEADER: "a header reads `Algorithm 5: Ṽ ← MHAttention(X, Z | 𝒲, Mask)` (outputs ← name(data | parameters))",
    Kind.SECTION: "a section line reads `Input: X ∈ ℝ^{d × ℓ}`, `Hyperparameters: H, d ∈ ℕ`, `Hyperparameters: "
                  "d_attn = d_e / H` or `Parameters: W ∈ ℝ^{d × d}`, with a comment after a comma",
    Kind.CONTINUATION: "a declaration reads `W ∈ ℝ^{d × d}`, `W_l : MHAttention`, `𝒲 consisting of:` or "
                       "`For h ∈ [H]: W^h ∈ ℝ^{d × d}`",
    Kind.BODY: "a body line is an assignment `X ← …`, `return Y = …`, a loop `for l = 1, 2, …, L do` or "
               "`For h ∈ [H]:`, a map `for t ∈ [ℓ] : …`, `∀t, t' : if … then …` or `end`",
    Kind.USE: "a use line reads `use MHAttention, layer_norm from \"primitives.alg\"`, `use \"primitives.alg\"` or "
              "`use Mistral as Phi3 from \"mistral.alg\"`",
}


# Operators of programming languages that the notation spells otherwise: what to write instead.
_OPERATOR_HINTS = {
    "%": "'%' is not an operator of the notation: write a remainder as `a mod b` (LaTeX `a \\bmod b`)",
    "//": "'//' is not an operator of the notation: write a floored division as ⌊a/b⌋ (ASCII `floor(a/b)`, "
          "LaTeX `\\lfloor a/b \\rfloor`)",
    "**": "'**' is not an operator of the notation: write a power as x^{k} or b^{e}",
    "&&": "'&&' is not an operator of the notation: write `a ∧ b` (ASCII `a and b`, LaTeX `a \\land b`)",
    "||": "'||' is not an operator of the notation: write `a ∨ b` (ASCII `a or b`, LaTeX `a \\lor b`)",
}


def _operator_hint(text: str, at: int | None) -> tuple[str, int] | None:
    """What to write instead of the operator the parser stopped at (or whose second character it stopped at)."""
    if at is None or not 0 <= at < len(text):
        return None
    for op, hint in _OPERATOR_HINTS.items():
        for start in (at, at - 1):
            if start >= 0 and text.startswith(op, start):
                return hint, start
    return None


_MAP_START = re.compile(r"\s*[Ff]or\s+[^\s,=∈]+\s*(,|∈|\\in\b|in\b)")


def _map_hint(text: str, at: int | None) -> int | None:
    """Where a `for … ∈ …` line goes wrong before its `:` (`for i, t ∈ …`, a missing comma or colon):
    the offset to point at, or None for other lines and for mistakes in the statement after the `:`."""
    if at is None or not _MAP_START.match(text):
        return None
    colon = text.find(":")
    return at if colon < 0 or at <= colon else None


def _unclosed_paren(text: str, at: int | None, expected: object) -> int | None:
    """The offset of the last '(' still open where the parser stopped, when it wanted a ')' there."""
    if not expected or "RPAR" not in expected:  # type: ignore[operator]
        return None
    stack: list[int] = []
    for i, ch in enumerate(text[:at if isinstance(at, int) and at >= 0 else len(text)]):
        if ch == "(":
            stack.append(i)
        elif ch == ")" and stack:
            stack.pop()
    return stack[-1] if stack else None

