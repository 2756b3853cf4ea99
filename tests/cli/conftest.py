"""The fixtures of the command-line tests: the command as a user runs it, and an empty output folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pseudoformer.cli import main

Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """Run the command; return (exit code, stdout, stderr). argparse's own exits count as returns."""
    def call(*args: str | Path) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        out, err = capsys.readouterr()
        return code, out, err
    return call


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    """An empty directory for outputs, so that 'nothing left behind' is 'still empty'."""
    d = tmp_path / "out"
    d.mkdir()
    return d
