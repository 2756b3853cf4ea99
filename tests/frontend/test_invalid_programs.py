"""Every file in invalid/ is a small wrong program; the CLI must report its mistakes the way a user needs them.

A case file starts with a comment header:

    # expect: 7:12: shape: cannot add      (one line per error, in the order they are reported)
    # note: did you mean b?                 (a note that must follow the error)
    # config: d_e=8 d_mlp=3.5               (hyperparameters, passed as -D)
    # command: inspect                      (default: check)

`expect` is `[FILE:]LINE:COL: KIND: text`, FILE relative to invalid/ when the error lies in another
file than the case; KIND names the error class, so each kind of mistake keeps its own class.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from pseudoformer.base.errors import AlgError, CompileError
from pseudoformer.base.terminal import escape
from pseudoformer.cli import main
from pseudoformer.frontend.errors import (
    AlgSyntaxError,
    ArityError,
    BadTypeError,
    DuplicateError,
    HyperparameterError,
    LayoutError,
    LimitError,
    ModuleError,
    ShapeError,
    TrainingError,
    UnknownNameError,
)
from pseudoformer.model import check, load

INVALID = Path(__file__).parent / "invalid"
CASES = sorted(p.name for p in INVALID.glob("*.alg"))

KINDS: dict[str, type[AlgError]] = {
    "syntax": AlgSyntaxError, "layout": LayoutError, "name": UnknownNameError, "module": ModuleError,
    "shape": ShapeError, "arity": ArityError, "hyper": HyperparameterError, "type": BadTypeError,
    "duplicate": DuplicateError, "limit": LimitError, "training": TrainingError,
}
_EXPECT = re.compile(r"# expect: (?:(?P<file>\S+\.alg):)?(?P<line>\d+):(?P<col>\d+): (?P<kind>\w+): (?P<text>.+)")
_ERROR_LINE = re.compile(r"^(?P<file>\S+):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.*)$")


@dataclass
class Expected:
    file: str
    line: int
    col: int
    kind: str
    text: str
    notes: list[str] = field(default_factory=list)


@dataclass
class Case:
    name: str
    expected: list[Expected]
    defines: list[str]
    command: str


def read_case(name: str) -> Case:
    expected: list[Expected] = []
    defines: list[str] = []
    command = "check"
    for raw in (INVALID / name).read_text(encoding="utf-8").splitlines():
        if m := _EXPECT.fullmatch(raw):
            expected.append(Expected(m["file"] or name, int(m["line"]), int(m["col"]), m["kind"], m["text"]))
        elif raw.startswith("# note: "):
            expected[-1].notes.append(raw.removeprefix("# note: "))
        elif raw.startswith("# config: "):
            defines += raw.removeprefix("# config: ").split()
        elif raw.startswith("# command: "):
            command = raw.removeprefix("# command: ").strip()
        elif not raw.startswith("#"):
            break
    assert expected, f"{name} has no `# expect:` header"
    for e in expected:
        assert e.kind in KINDS, f"{name}: unknown kind {e.kind!r}"
    return Case(name, expected, defines, command)


def run_cli(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    argv = [case.command, case.name]
    for d in case.defines:
        argv += ["-D", d]
    if case.command == "run":
        # Inputs that would fit the program: the error must come from the source, not from them.
        data = tmp_path / "X.npy"
        np.save(data, np.zeros((1, 3, 4), dtype=np.float32))
        argv += ["--input", f"X={data}", "-o", str(tmp_path / "out.npz")]
    rc = main(argv)
    return rc, capsys.readouterr().err


@pytest.fixture(autouse=True)
def _in_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    # Relative paths, so the messages read `case.alg:7:12` exactly as the headers write them.
    monkeypatch.chdir(INVALID)


def test_corpus_is_large_and_covers_every_kind() -> None:
    cases = [read_case(n) for n in CASES]
    assert len(cases) >= 30
    assert {e.kind for c in cases for e in c.expected} == set(KINDS)


@pytest.mark.parametrize("name", CASES)
def test_cli_reports_the_error(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = read_case(name)
    rc, err = run_cli(case, tmp_path, capsys)
    assert rc == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.splitlines()
    reported = [i for i, text in enumerate(lines) if _ERROR_LINE.match(text)]
    assert len(reported) == len(case.expected), err
    if len(reported) > 1:
        assert lines[-1] == f"{len(reported)} errors"
    for exp, i in zip(case.expected, reported, strict=True):
        m = _ERROR_LINE.match(lines[i])
        assert m is not None
        assert (m["file"], int(m["line"]), int(m["col"])) == (exp.file, exp.line, exp.col), lines[i]
        assert exp.text in m["msg"], lines[i]
        # The source line, then a caret under the column.
        source = (INVALID / exp.file).read_text(encoding="utf-8").splitlines()[exp.line - 1]
        # (escaped for the terminal, pseudoformer/base/terminal.py: a control character shows as \x07)
        assert lines[i + 1] == f"    {escape(source, keep=chr(9))}", err
        caret = lines[i + 2]
        assert caret.strip() == "^" and caret.index("^") == 4 + len(escape(source[:exp.col - 1], keep=chr(9))), err
        notes = []
        for after in lines[i + 3:]:
            if not after.startswith("  note: "):
                break
            notes.append(after.removeprefix("  note: "))
        for note in exp.notes:
            assert note in notes, err


@pytest.mark.parametrize("name", CASES)
def test_each_kind_of_mistake_has_its_class(name: str) -> None:
    """The same errors through the Python API: positions, and the class the header's KIND names."""
    case = read_case(name)
    with pytest.raises(CompileError) as info:
        if case.command == "check":
            check(case.name, defines=case.defines)
        else:
            load(case.name, defines=case.defines)
    got = [(type(e), e.pos.file if e.pos else None, e.pos.line if e.pos else None, e.pos.col if e.pos else None)
           for e in info.value.errors]
    want = [(KINDS[e.kind], e.file, e.line, e.col) for e in case.expected]
    assert got == want


def test_run_reports_a_source_error_with_its_position(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`run` elaborates before it touches the inputs' values, and fails the same way as `check`."""
    case = read_case("shape_matmul.alg")
    case.command = "run"
    case.defines = ["d_e=4", "d_mlp=8"]
    rc, err = run_cli(case, tmp_path, capsys)
    assert rc == 1
    assert err.startswith("shape_matmul.alg:8:16: error: matrix product ℝ^{8 × 4} · ℝ^{8 × 4}: sizes 4 and 8 differ")
    assert not (tmp_path / "out.npz").exists()


def test_a_syntax_error_does_not_hide_a_later_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Lines parse one at a time: errors on lines 2 and 4, and no made-up error in between."""
    src = tmp_path / "two.alg"
    src.write_text("Algorithm: y ← F(x)\n"
                   "  Input: x ∈ ℝ^{d}\n"
                   "  Output: y ∈ ℝ^{d}\n"
                   "  1 z ← x ) x\n"
                   "  2 z ← z + z\n"
                   "  3 return y = ∈ z\n", encoding="utf-8")
    rc = main(["check", str(src)])
    err = capsys.readouterr().err
    assert rc == 1
    positioned = [line for line in err.splitlines() if _ERROR_LINE.match(line)]
    assert [line.split(": error")[0] for line in positioned] == [f"{src}:4:11", f"{src}:6:16"], err
    assert err.splitlines()[-1] == "2 errors"


def test_errors_of_several_files_are_all_reported(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", "shape_add.alg", "name_unknown_did_you_mean.alg"])
    err = capsys.readouterr().err
    assert rc == 1
    files = [m["file"] for line in err.splitlines() if (m := _ERROR_LINE.match(line))]
    assert files == ["name_unknown_did_you_mean.alg", "shape_add.alg"]


def test_a_file_that_is_not_utf8_is_reported_at_the_bad_byte(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "latin1.alg"
    before = "  Input: x ∈ ℝ^{d}, caf"  # then a Latin-1 é: the column counts characters, not bytes
    src.write_bytes(f"Algorithm: y ← F(x)\n{before}".encode() + "é\n".encode("latin-1"))
    rc = main(["check", str(src)])
    err = capsys.readouterr().err.splitlines()
    assert rc == 1
    assert err[0] == f"{src}:2:{len(before) + 1}: error: {src} is not UTF-8 text (byte 0xe9)"
    assert err[2].index("^") == 4 + len(before)


def test_a_byte_order_mark_is_not_part_of_the_first_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "bom.alg"
    src.write_text("\ufeffAlgorithm: y ← F(x)\n  Input: x ∈ ℝ^{d}\n  Output: y ∈ ℝ^{d}\n  1 return y = x\n",
                   encoding="utf-8")
    assert main(["check", str(src)]) == 0, capsys.readouterr().err
