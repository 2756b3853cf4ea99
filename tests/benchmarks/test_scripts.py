"""Every script in benchmarks/ still runs (its `--help`, which imports everything it imports at the top), no
script imports another script, and `--threads`, a generation's --prompt, --new and --rounds and a training step's
--batch, --seq, --layers and --steps are declared once, by the harness (benchmarks/common/harness.py).

The scripts' own smoke runs at tiny sizes are beside this file (test_bench_*.py); this one is the floor every
script, smoke-tested or not, is held to. Nothing here times anything.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(p for p in BENCH.glob("*.py"))
COMMON = sorted((BENCH / "common").glob("*.py"))
# What a script imports before it parses its arguments that the benchmark extra may not install.
NEEDS = {"llamacpp_gguf.py": "gguf"}


def imported(path: Path) -> set[str]:
    """The top-level module names `path` imports, `benchmarks.` taken off."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.removeprefix("benchmarks.").split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.removeprefix("benchmarks.").split(".")[0])
    return names


def test_no_script_imports_another_script() -> None:
    scripts = {p.stem for p in SCRIPTS}
    offenders = {p.relative_to(BENCH).as_posix(): sorted(imported(p) & (scripts - {p.stem}))
                 for p in SCRIPTS + COMMON}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_threads_is_declared_by_the_harness_alone() -> None:
    declared = [p.relative_to(BENCH).as_posix() for p in SCRIPTS + COMMON
                if 'add_argument("--threads"' in p.read_text()]
    assert declared == ["common/harness.py"]


def test_generation_and_training_flags_are_declared_by_the_harness_alone() -> None:
    """--prompt and --new together (with --rounds) are decode_arguments', and the command lines that pass them to
    a timing script in another venv are decode_flags'."""
    declared = [p.relative_to(BENCH).as_posix() for p in SCRIPTS + COMMON
                if all(f'add_argument("--{flag}"' in p.read_text() for flag in ("prompt", "new"))]
    assert declared == ["common/harness.py"]
    # and a training step's sizes, training_arguments'
    declared = [p.relative_to(BENCH).as_posix() for p in SCRIPTS + COMMON
                if all(f'add_argument("--{flag}"' in p.read_text() for flag in ("batch", "seq", "steps"))]
    assert declared == ["common/harness.py"]
    spelled = [p.relative_to(BENCH).as_posix() for p in SCRIPTS + COMMON if '"--new", str(' in p.read_text()]
    assert spelled == ["common/harness.py"]


@pytest.mark.parametrize("script", [p.name for p in SCRIPTS])
def test_every_script_answers_help(script: str) -> None:
    if NEEDS.get(script):
        pytest.importorskip(NEEDS[script])
    proc = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True,
                          timeout=300, cwd=BENCH.parent.parent)  # from outside the repository: the script finds its own
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "usage:" in proc.stdout


def test_machine_facts_name_the_cpu_and_the_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    from common.harness import machine_facts, machine_summary

    facts = machine_facts("numpy", "no-such-package")
    assert facts["cpu"] and facts["logical_cpus"] and facts["numpy"] and facts["no-such-package"] is None
    assert facts["cpu"] in machine_summary()


def test_block_times_give_one_figure_a_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    from common.harness import block_medians, block_times

    calls: list[str] = []
    times = block_times({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, blocks=3, runs=2, warmup=1)
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3}
    assert calls == (["a"] * 3 + ["b"] * 3) * 3  # blocks alternate: a's warm-up and runs, then b's
    assert set(block_medians({"a": lambda: None}, blocks=1, runs=1)) == {"a"}


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_into_and_within_the_benchmarks_pages_resolve() -> None:
    root = BENCH.parent
    pages = [BENCH / "README.md", *sorted((BENCH / "history").glob("*.md")), root / "README.md",
             *sorted((root / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if page.parent != BENCH and "benchmarks" not in file.parts and page.parent.name != "history":
                continue  # the docs' own links are not this test's
            if not file.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and file.suffix == ".md":
                slugs = {_slug(line.lstrip("#")) for line in file.read_text().splitlines() if line.startswith("#")}
                if anchor not in slugs:
                    broken.append(f"{page.name}: {target}")
    assert broken == []


def test_generation_rounds_take_each_variants_own_times(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench_llama.py's and bench_quant.py's rounds: the warm-up round left out, a step figure per round."""
    monkeypatch.syspath_prepend(str(BENCH))
    from common import harness
    from common.decoding import generation_rounds

    monkeypatch.setattr(harness.time, "sleep", lambda s: None)
    calls = iter(range(100))

    def variant(tokens: list[int]):  # noqa: ANN202
        return lambda: (tokens, float(next(calls)), [0.1, 0.3, 0.2])

    rows, tokens = generation_rounds({"a": variant([1, 2]), "b": variant([1, 3])}, rounds=2)
    assert tokens == {"a": [1, 2], "b": [1, 3]}
    assert rows == {"a": {"prefill": [2.0, 5.0], "step": [0.2, 0.2]}, "b": {"prefill": [3.0, 4.0], "step": [0.2, 0.2]}}
