"""Kind 4: source that an editor shows differently from how it compiles is refused, at its place.

Each line break other than \\n and \\r\\n, and each bidi control, is tried where it would hide code:
after a `#` comment (where the old splitter ended the comment and ran what followed), inside a
/* block comment */, and in code. Names that differ only by a mathematical letter style are refused
as confusable. The docs (docs/language.md §6) say why they are refused rather than kept apart.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pseudoformer.base.terminal import BIDI_CONTROLS
from pseudoformer.frontend.source_text import LINE_BREAKS
from tests.hostile.conftest import judge, run_cli

HEAD = "Algorithm: y ← F(x)\n  Input: x ∈ ℝ^{d}\n  Output: y ∈ ℝ^{d}\n"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.alg"
    path.write_bytes(text.encode("utf-8"))
    return path


@pytest.mark.parametrize("ch", sorted(LINE_BREAKS), ids=[f"U+{ord(c):04X}" for c in sorted(LINE_BREAKS)])
def test_a_line_break_that_editors_do_not_show_hides_no_code(ch: str, tmp_path: Path,
                                                             capfd: pytest.CaptureFixture[str]) -> None:
    # An editor shows one line ending in a comment; Python's splitlines saw a second line, `2 return y = x`.
    src = _write(tmp_path, HEAD + f"  1 y ← x # harmless{ch}  2 return y = x\n")
    r = run_cli(["check", src], capfd)
    judge(r, "m.alg:4:21: error:")
    assert "a line ends at \\n or \\r\\n" in r.err


@pytest.mark.parametrize("ch", sorted(BIDI_CONTROLS), ids=[f"U+{ord(c):04X}" for c in sorted(BIDI_CONTROLS)])
@pytest.mark.parametrize("where", ["line comment", "block comment", "code"])
def test_a_bidi_control_is_refused_anywhere(ch: str, where: str, tmp_path: Path,
                                            capfd: pytest.CaptureFixture[str]) -> None:
    line = {"line comment": f"  1 return y = x  # {ch}evil", "block comment": f"  1 return y = x /* {ch} */",
            "code": f"  1 return y = x{ch}"}[where]
    r = run_cli(["check", _write(tmp_path, HEAD + line + "\n")], capfd)
    assert r.code == 1 and "Trojan Source" in r.err and "m.alg:4:" in r.err, r.err
    assert ch not in r.err  # quoted escaped, so the terminal does not reorder the quote either


def test_crlf_line_ends_are_ordinary(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    src = _write(tmp_path, (HEAD + "  1 return y = x\n").replace("\n", "\r\n"))
    assert run_cli(["check", src, "-D", "d=2"], capfd).code == 0


@pytest.mark.parametrize("styled", ["\U0001d4b2", "\U0001d416", "\U0001d54e", "\U0001d6be"])  # 𝒲 𝐖 𝕎, and 𝚾 vs Χ
def test_names_that_differ_only_by_a_math_alphabet_style_are_confusable(styled: str, tmp_path: Path,
                                                                        capfd: pytest.CaptureFixture[str]) -> None:
    import unicodedata

    plain = unicodedata.normalize("NFKC", styled)
    src = _write(tmp_path, f"Algorithm: y ← F(x | {plain}, {styled})\n  Input: x ∈ ℝ^{{d}}\n  Output: y ∈ ℝ^{{d}}\n"
                           f"  Parameters: {plain} ∈ ℝ^{{d}}, {styled} ∈ ℝ^{{d}}\n  1 return y = x + {styled}\n")
    r = run_cli(["check", src, "-D", "d=2"], capfd)
    assert r.code == 1 and "differ only by a mathematical letter style" in r.err, r.err


def test_a_styled_group_label_beside_its_plain_members_is_fine(tmp_path: Path,
                                                               capfd: pytest.CaptureFixture[str]) -> None:
    # The paper's own use: 𝒲 names the group, W^h_q its members. Only whole names are compared.
    paper = Path(__file__).resolve().parents[2] / "models" / "paper" / "primitives.alg"
    assert run_cli(["check", paper], capfd).code == 0


@pytest.mark.parametrize("line", ["q" * 200_000 + " x", "W_" * 100_000, " " * 200_000 + "consisting x",
                                  "W" + " " * 200_000 + "consisting" + " " * 100_000 + "of"])
def test_the_twin_scan_is_linear_on_long_lines(line: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The long fuzz run found the first twin scan backtracking without end on a 200,000-character name
    (a regex that Python cannot interrupt, so the hang guard could not stop it either)."""
    import time

    src = _write(tmp_path, HEAD + "  \U0001d4b2 consisting of\n" + line + "\n")
    start = time.perf_counter()
    r = run_cli(["check", src], capfd)
    assert r.code == 1 and "internal error" not in r.err
    assert time.perf_counter() - start < 30
