"""Kind: source whose depth, not size, would exhaust Python's stack or float32's range.

Algorithm calls are inlined and `use`s are read by recursion, and the grammar drops parentheses from its
tree: a chain of 1,000 `use`s or calls, or 150 nested parentheses, each ended in an internal error or was
accepted. Each is now one located diagnostic at the level that goes too deep. A literal past float32's range
(`x + 1e999999`) compiled to ∞; it is refused where it is written. An entry file reached through a link
uses the files beside the file it links to, as a Python script run through a link does."""

from __future__ import annotations

from pathlib import Path

import pytest

from pseudoformer.base.limits import MAX_CALL_DEPTH, MAX_NESTING, MAX_USE_DEPTH
from tests.hostile.conftest import MODELS, judge, run_cli

SIG = "  Input: x ∈ ℝ^{3}\n  Output: y ∈ ℝ^{3}\n"


def _chain(tmp_path: Path, n: int, *, files: bool) -> Path:
    """f0 calls f1 … calls f{n-1}: in one file, or each in its own file that uses the next."""
    parts = []
    for i in range(n):
        body = f"  1 return y = f{i + 1}(x)\n" if i < n - 1 else "  1 return y = x\n"
        text = f"Algorithm: y ← f{i}(x)\n{SIG}{body}"
        if files:
            (tmp_path / f"m{i}.alg").write_text((f'use f{i + 1} from "m{i + 1}.alg"\n' if i < n - 1 else "") + text)
        parts.append(text)
    if not files:
        (tmp_path / "m0.alg").write_text("\n".join(parts))
    return tmp_path / "m0.alg"


@pytest.mark.parametrize("files", [False, True], ids=["calls", "uses"])
def test_a_deep_chain_is_one_located_diagnostic(files: bool, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    r = run_cli(["check", _chain(tmp_path, 1000, files=files), "--entry", "f0"], capfd)
    judge(r, f"more than {MAX_USE_DEPTH if files else MAX_CALL_DEPTH}")
    assert r.err.splitlines()[0].split(":")[1].isdigit()  # file:line:col


@pytest.mark.parametrize("files", [False, True], ids=["calls", "uses"])
def test_a_chain_within_the_limit_checks(files: bool, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    r = run_cli(["check", _chain(tmp_path, 40, files=files), "--entry", "f0"], capfd)
    assert r.code == 0, r.err


@pytest.mark.parametrize("depth, ok", [(MAX_NESTING - 5, True), (MAX_NESTING + 1, False), (1000, False)])
def test_parentheses_count_as_levels(depth: int, ok: bool, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "n.alg"
    path.write_text(f"Algorithm: y ← g(x)\n{SIG}  1 return y = {'(' * depth}x{')' * depth}\n")
    r = run_cli(["check", path], capfd)
    if ok:
        assert r.code == 0, r.err
    else:
        judge(r, f"nested more than {MAX_NESTING} levels")


@pytest.mark.parametrize("literal", ["1e999999", "3.5e38", "-1e39", "1" + "0" * 60])
def test_a_literal_past_float32_is_refused_where_written(literal: str, tmp_path: Path,
                                                         capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "n.alg"
    path.write_text(f"Algorithm: y ← g(x)\n{SIG}  1 return y = x + {literal}\n")
    r = run_cli(["check", path], capfd)
    judge(r, "beyond float32's range")
    assert "n.alg:4:" in r.err  # at its line


def test_the_largest_float32_literal_is_taken(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "n.alg"
    path.write_text(f"Algorithm: y ← g(x)\n{SIG}  1 return y = x + 3.4e38 * 1e-38\n")
    assert run_cli(["check", path], capfd).code == 0


def test_a_linked_entry_file_uses_its_own_neighbours(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "sub").mkdir()
    link = tmp_path / "sub" / "gpt2.alg"
    link.symlink_to(MODELS / "gpt2.alg")  # gpt2.alg uses paper/primitives.alg and variants.alg beside it
    r = run_cli(["check", link, "--config", MODELS / "gpt2.toml"], capfd)
    assert r.code == 0, r.err
