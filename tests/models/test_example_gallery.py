"""models/examples/ as a whole: every example has a config, a test, a row in the README, and checks
through the command line as an installed model (`examples/alibi`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pseudoformer.cli import main
from pseudoformer.model import resolve_source
from tests.models.examples_numpy import EXAMPLES

NAMES = sorted(p.stem for p in EXAMPLES.glob("*.alg"))


def test_the_gallery_is_complete() -> None:
    assert NAMES == ["alibi", "classifier", "gemma2", "linear_attention", "lora", "moe", "multi_query", "neox", "prefix_lm", "retnet",
                     "sliding_window", "sparse_strided", "t5_bias", "t5_buckets", "vit"]
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    tests = Path(__file__).parent
    for name in NAMES:
        assert (EXAMPLES / f"{name}.toml").is_file()
        assert (tests / f"test_example_{name}.py").is_file()
        assert f"[`{name}.alg`]({name}.alg)" in readme
        header = (EXAMPLES / f"{name}.alg").read_text(encoding="utf-8").splitlines()[0]
        assert header.startswith("# "), f"{name}.alg starts without its comment header"


@pytest.mark.parametrize("name", NAMES)
def test_check_on_the_command_line(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    installed = resolve_source(f"examples/{name}")  # the installed copy: this tree, or a wheel's
    assert installed.read_bytes() == (EXAMPLES / f"{name}.alg").read_bytes()
    assert main(["check", f"examples/{name}"]) == 0
    assert "ok (" in capsys.readouterr().out
