"""Running mutants of every input kind through the CLI, in parallel, and judging each outcome.

A job is a model file or a training algorithm of tests/frontend/training (its .alg text, or the
.toml beside it, mutated and run through `pseudoformer check`) or another input kind of inputs.py (a
checkpoint's config.json, a safetensors or GGUF file, a tokenizer.json, an ONNX model, each run
through the command that reads it). Every mutant runs in-process (`pseudoformer.cli.main`), in
worker processes that each hold their own copy of models/ (the mutant replaces its file there, so
`use` lines and the .toml beside it are found as for the real file, and is put back afterwards)
and their own directory for the other kinds' mutants. A worker's address space is capped, so a
mutant that makes pseudoformer allocate without bound fails as a MemoryError instead of taking the
machine down, and an alarm ends a mutant that hangs.

An outcome is good when it is a success (exit 0) or one clean diagnostic (exit 1, messages that
start `error:` or `FILE:LINE:COL: error:`, no internal error), within MAX_SECONDS.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import random
import re
import resource
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.fuzz.inputs import KINDS, build_bases
from tests.fuzz.mutations import mutate_config, mutate_source

MODELS = Path(__file__).resolve().parents[2] / "models"
# The training algorithms (Algorithms 11–13, over the paper's models and GPT-2, Llama, BERT, BART), copied
# under training/ beside the models: their `use` lines reach the installed models as from the tests.
TRAINING = Path(__file__).resolve().parents[1] / "frontend" / "training"
FILES = sorted(str(p.relative_to(MODELS)) for p in MODELS.rglob("*.alg")) + \
    sorted(f"training/{p.name}" for p in TRAINING.glob("*.alg"))
KIND_WEIGHT = 3  # each non-.alg input kind gets the jobs of this many model files
MAX_SECONDS = 5.0  # issue 16's target for the long run (__main__), on an idle machine; not asserted in tests
HANG_SECONDS = 60  # a mutant still running then is stopped, and fails as a hang
MEMORY_CAP = 4 << 30  # bytes of address space per worker
CONFIG_SHARE = 0.15  # the share of mutants that edit the .toml beside the file instead
_MESSAGE = re.compile(r"^(\S+:\d+:\d+: )?error: \S")


@dataclass
class Outcome:
    file: str
    seed: int
    edit: str
    code: int
    seconds: float
    err: str

    @property
    def problem(self) -> str | None:
        """What is wrong with this outcome, or None for a success or a clean diagnostic."""
        if "internal error" in self.err or "Traceback" in self.err:
            return "internal error"
        if self.code not in (0, 1):
            return f"exit code {self.code}"
        if self.code == 1 and not _MESSAGE.match(self.err):
            return "no clear message"
        return None  # time is not judged here: a wall-clock bound would fail on a loaded machine

    def __str__(self) -> str:
        first = self.err.splitlines()[0][:300] if self.err else ""
        return f"{self.file} mutant {self.seed} ({self.edit[:200]}): {self.problem or 'ok'}, exit {self.code}, " \
               f"{self.seconds:.2f} s: {first}"


def copy_models(dest: Path) -> Path:
    """models/ with every config at one layer and two heads: the same paths for a fraction of the time."""
    root = dest / "models"
    shutil.copytree(MODELS, root, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    shutil.copytree(TRAINING, root / "training")
    for toml in root.rglob("*.toml"):
        text = re.sub(r"(?m)^(L|L_enc|L_dec) = \d+$", r"\1 = 1", toml.read_text(encoding="utf-8"))
        toml.write_text(re.sub(r"(?m)^H = \d+$", "H = 2", text), encoding="utf-8")
    return root


class _Hang(SystemExit):
    """Raised by the alarm: a SystemExit, which main() passes on (it turns every other exception, Rust
    panics included, into a message), so the hang is reported as one."""


def _alarm(signum: int, frame: object) -> None:
    raise _Hang()


def _run(argv: list[str]) -> tuple[int, str]:
    """main(argv) under the hang alarm: the exit code and what it printed on stderr."""
    from pseudoformer.cli import main

    err = io.StringIO()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_SECONDS)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
    except _Hang:
        code = -1
        err.write(f"hang: still running after {HANG_SECONDS} s\n")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    finally:
        signal.alarm(0)
    return code, err.getvalue()


def run_kind(bases: Path, work: Path, kind: str, seed: int) -> Outcome:
    """One mutant of a non-.alg input kind (inputs.py), run through the command that reads it."""
    rng = random.Random(f"{kind}:{seed}")
    start = time.perf_counter()
    argv, edit = KINDS[kind](bases, work, rng)
    code, err = _run(argv)
    return Outcome(kind, seed, edit, code, time.perf_counter() - start, err)


def run_mutant(root: Path, rel: str, seed: int) -> Outcome:
    rng = random.Random(f"{rel}:{seed}")
    path = root / rel
    toml = path.with_suffix(".toml")
    target = toml if toml.exists() and rng.random() < CONFIG_SHARE else path
    original = target.read_text(encoding="utf-8")
    text, edit = (mutate_config if target is toml else mutate_source)(original, rng)
    target.write_text(text, encoding="utf-8", errors="surrogatepass")
    start = time.perf_counter()
    try:
        code, err = _run(["check", str(path)])
    finally:
        target.write_text(original, encoding="utf-8")
    return Outcome(rel, seed, ("config: " if target is toml else "") + edit, code, time.perf_counter() - start, err)


def _work(args: tuple[list[tuple[str, int]], str | None]) -> list[Outcome]:
    jobs, bases = args
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, resource.getrlimit(resource.RLIMIT_AS)[1]))
    with tempfile.TemporaryDirectory(prefix="pseudoformer-fuzz-") as tmp:
        root = copy_models(Path(tmp))
        work = Path(tmp) / "work"
        work.mkdir()
        outcomes = []
        log = os.environ.get("PSEUDOFORMER_FUZZ_LOG")  # a line per mutant as it ends: a long run's progress
        for target, seed in jobs:
            if bases is None and target in KINDS:
                continue
            o = run_kind(Path(bases), work, target, seed) if target in KINDS else run_mutant(root, target, seed)
            outcomes.append(o)
            if log:
                with open(log, "a", encoding="utf-8") as f:
                    f.write(f"{o.seconds:.2f}\t{o.problem or ('success' if o.code == 0 else 'diagnostic')}\t"
                            f"{o.file}\t{o.seed}\n")
        return outcomes


def targets(kinds: bool = True, files: bool = True) -> list[str]:
    """What the jobs cycle through: every model file, and each other input kind KIND_WEIGHT times."""
    return [*(FILES if files else []), *(k for k in KINDS for _ in range(KIND_WEIGHT) if kinds)]


def run_mutants(count: int, workers: int | None = None, first_seed: int = 0, *, kinds: bool = True,
                files: bool = True) -> list[Outcome]:
    """`count` mutants, spread over every model file (`files`) and the other input kinds (`kinds`), on
    `workers` processes (default: the CPUs)."""
    cycle = targets(kinds, files)
    seen: dict[str, int] = {}
    jobs = []
    for i in range(count):  # a target that appears k times in the cycle gets k seeds per round
        target = cycle[i % len(cycle)]
        seen[target] = seen.get(target, -1) + 1
        jobs.append((target, first_seed + seen[target]))
    workers = workers or len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="pseudoformer-fuzz-bases-") as tmp:
        bases = str(build_bases(Path(tmp))) if kinds else None
        shares = [(jobs[w::workers], bases) for w in range(workers)]
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            results = pool.map(_work, shares)
    return sorted((o for r in results for o in r), key=lambda o: (o.file, o.seed))
