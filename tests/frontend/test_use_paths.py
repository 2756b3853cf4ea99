"""Where a `use` may read from: relative to the using file, inside the allowed roots (the entry's
directory tree, --include directories, the installed models/), symbolic links resolved."""

from __future__ import annotations

from pathlib import Path

import pytest

from pseudoformer.base.errors import CompileError, UsageError
from pseudoformer.cli import main
from pseudoformer.frontend.errors import ModuleError
from pseudoformer.model import check

LIB = "Algorithm: y ← Twice(x)\n  Input: x ∈ ℝ^{d}\n  Output: y ∈ ℝ^{d}\n  1 return y = x + x\n"
USER = "Algorithm: y ← F(x)\n  Input: x ∈ ℝ^{d}\n  Output: y ∈ ℝ^{d}\n  1 return y = Twice(x)\n"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_any_file_may_use_the_installed_models(tmp_path: Path) -> None:
    src = _write(tmp_path / "mine.alg", 'use layer_norm from "variants.alg"\n'
                 "Algorithm: y ← F(x | γ, β)\n  Input: x ∈ ℝ^{d}\n  Output: y ∈ ℝ^{d}\n"
                 "  Parameters: γ, β ∈ ℝ^{d}\n  Hyperparameters: ε ∈ ℝ\n  1 return y = layer_norm(x | γ, β)\n")
    assert check(src) == ["F"]


def test_a_subdirectory_of_the_entry_is_inside(tmp_path: Path) -> None:
    _write(tmp_path / "lib" / "twice.alg", LIB)
    src = _write(tmp_path / "main.alg", 'use "lib/twice.alg"\n' + USER)
    assert check(src) == ["F"]


def test_include_adds_a_root(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / "shared" / "twice.alg", LIB)
    src = _write(tmp_path / "project" / "main.alg", 'use "twice.alg"\n' + USER)
    assert main(["check", str(src)]) == 1
    err = capsys.readouterr().err
    assert "no such file:" in err and "in each --include directory" in err, err
    assert main(["check", str(src), "--include", str(tmp_path / "shared")]) == 0, capsys.readouterr().err
    # Reaching it by a relative path out of the project is fine too, once its directory is included.
    up = _write(tmp_path / "project" / "up.alg", 'use "../shared/twice.alg"\n' + USER)
    with pytest.raises(CompileError, match="leads outside"):
        check(up)
    assert check(up, include=[tmp_path / "shared"]) == ["F"]


def test_a_link_out_of_the_roots_is_refused(tmp_path: Path) -> None:
    outside = _write(tmp_path / "elsewhere" / "twice.alg", LIB)
    project = tmp_path / "project"
    project.mkdir()
    (project / "twice.alg").symlink_to(outside)
    src = _write(project / "main.alg", 'use "twice.alg"\n' + USER)
    with pytest.raises(CompileError) as info:
        check(src)
    (e,) = info.value.errors
    assert isinstance(e, ModuleError) and "leads outside" in e.message and (e.pos.line, e.pos.col) == (1, 5)


def test_an_include_that_is_no_directory_is_refused(tmp_path: Path) -> None:
    src = _write(tmp_path / "main.alg", USER.replace("Twice(x)", "x"))
    with pytest.raises(UsageError, match="--include .*: no such directory"):
        check(src, include=[tmp_path / "missing"])
