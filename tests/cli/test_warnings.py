"""Warnings raised during a command: each distinct one printed once, escaped, after the command; never a loop.

main() records warnings while a command runs. Showing one while still recording recorded it again, so a
single warning made the command loop until memory ran out (a Q8_0 block with an infinite scale, a float16
compile of a 1e30 weight, `train --lr 1e39`): the kind is any warning at all, so the test raises its own."""

from __future__ import annotations

import warnings

import pytest

from pseudoformer import cli
from pseudoformer.base.errors import ContribFallbackWarning


def _warns(kinds: list[tuple[type[Warning], str]]):
    def handler(args) -> int:  # noqa: ANN001
        for category, message in kinds:
            warnings.warn(message, category, stacklevel=1)
        return 0
    return handler


def test_each_distinct_warning_once_and_the_command_ends(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    kinds = [(RuntimeWarning, "overflow encountered in cast")] * 1000 + [
        (UserWarning, "a \x1b[2Jsecond kind\nforged line"), (ContribFallbackWarning, "2 attention op(s) stay")]
    monkeypatch.setattr(cli, "_check", _warns(kinds))
    assert cli.main(["check", "models/gpt2.alg"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == ["warning (RuntimeWarning): overflow encountered in cast",
                   "warning (UserWarning): a \\x1b[2Jsecond kind\\x0aforged line",
                   "note: 2 attention op(s) stay"]


def test_warnings_before_an_error_are_still_shown(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    def handler(args) -> int:  # noqa: ANN001
        warnings.warn("divide by zero", RuntimeWarning, stacklevel=1)
        raise cli.UsageError("the model diverged")
    monkeypatch.setattr(cli, "_check", handler)
    assert cli.main(["check", "models/gpt2.alg"]) == 1
    err = capsys.readouterr().err
    assert "warning (RuntimeWarning): divide by zero" in err and "the model diverged" in err
