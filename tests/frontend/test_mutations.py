"""Broken copies of the real models must fail as user errors: exit 1 with a positioned message, never a crash.

Each model file gets seeded random mutations (a character deleted or inserted, the file cut short,
a line duplicated or two swapped, a word or symbol dropped, two neighbouring ones swapped). `check` runs on a copy of the whole models tree, so the `use`d
files and the .toml configs beside the models are found as they would be. The configs keep their
keys but get L = H = 2: the mutants exercise the same paths at a fraction of GPT-2's unrolled size.
"""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path

import pytest

from pseudoformer.cli import main

MODELS = Path(__file__).resolve().parents[2] / "models"
FILES = ["gpt2.alg", "bert.alg", *sorted(f"paper/{p.name}" for p in (MODELS / "paper").glob("*.alg"))]
MUTANTS_PER_FILE = 40
# Characters that matter to the grammar or the layout, and a few plain ones.
TRICKY = [*"()[]{}←ᵀ,|:=∈×·⊙√Σ^_';…−+/*0123456789xXlWtε", "<-", "^T", "[[", "]]", " ", "\n", "\t", "end", "do"]
_POSITIONED = re.compile(r"^\S+:\d+:\d+: error: ")
_TOKEN = re.compile(r"\w+|\S")


def mutate(text: str, rng: random.Random) -> tuple[str, str]:
    """One random edit; returns the new text and a description for the failure message."""
    lines = text.splitlines(keepends=True)
    kind = rng.choice(["delete", "insert", "truncate", "duplicate", "swap", "drop_token", "swap_tokens"])
    tokens = [m.span() for m in _TOKEN.finditer(text)]
    if kind == "drop_token":  # a lost `∈` or `|` shifts the meaning of the rest of the line
        a, b = rng.choice(tokens)
        return text[:a] + text[b:], f"drop {text[a:b]!r} at offset {a}"
    if kind == "swap_tokens":
        i = rng.randrange(len(tokens) - 1)
        (a, b), (c, d) = tokens[i], tokens[i + 1]
        return text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:], f"swap {text[a:b]!r} and {text[c:d]!r}"
    if kind == "delete":
        i = rng.randrange(len(text))
        return text[:i] + text[i + 1:], f"delete {text[i]!r} at offset {i}"
    if kind == "insert":
        i, s = rng.randrange(len(text) + 1), rng.choice(TRICKY)
        return text[:i] + s + text[i:], f"insert {s!r} at offset {i}"
    if kind == "truncate":
        i = rng.randrange(len(text))
        return text[:i], f"truncate at offset {i}"
    i = rng.randrange(len(lines))
    if kind == "duplicate":
        return "".join(lines[: i + 1] + lines[i:]), f"duplicate line {i + 1}"
    j = rng.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]
    return "".join(lines), f"swap lines {i + 1} and {j + 1}"


@pytest.fixture(scope="module")
def models_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mutants") / "models"
    shutil.copytree(MODELS, root, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    for toml in root.rglob("*.toml"):
        toml.write_text(re.sub(r"^(L|H) = \d+$", r"\1 = 2", toml.read_text(encoding="utf-8"), flags=re.M),
                        encoding="utf-8")
    return root


def test_the_unmutated_models_pass(models_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", *(str(models_copy / f) for f in FILES)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("rel", FILES)
def test_mutants_fail_cleanly(rel: str, models_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = models_copy / rel
    original = path.read_text(encoding="utf-8")
    outcomes: dict[int, int] = {0: 0, 1: 0}
    try:
        for seed in range(MUTANTS_PER_FILE):
            text, edit = mutate(original, random.Random(f"{rel}:{seed}"))
            path.write_text(text, encoding="utf-8")
            rc = main(["check", str(path)])
            err = capsys.readouterr().err
            where = f"{rel} mutant {seed} ({edit})"
            assert rc in (0, 1), f"{where}: exit {rc}\n{err}"
            assert "Traceback" not in err, f"{where}\n{err}"
            outcomes[rc] += 1
            if rc == 1:
                first = err.splitlines()[0] if err else ""
                assert _POSITIONED.match(first), f"{where}: unpositioned diagnostic\n{err}"
                # Every error of the report has a position, not only the first.
                for line in err.splitlines():
                    if "error: " in line and not line.startswith(" "):
                        assert _POSITIONED.match(line), f"{where}: unpositioned diagnostic\n{err}"
    finally:
        path.write_text(original, encoding="utf-8")
    # Most edits break a model; a suite where all mutants pass would test nothing.
    assert outcomes[1] > MUTANTS_PER_FILE // 2, outcomes
