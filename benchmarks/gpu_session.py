#!/usr/bin/env python3
"""One command for a session on the GPU machine: the CUDA tests, then benchmarks/gpu.py, within one time budget,
everything they say written to one folder ($OUT, the folder the device tool brings back).

    bash .gpu/device.sh python3 benchmarks/gpu_session.py          # on the GPU machine (docs/gpu.md, shared/gpu/)
    python benchmarks/gpu_session.py --smoke --out DIR             # anywhere: the same steps, tiny, on the CPU
    python benchmarks/gpu_session.py --dry-run                     # the plan: each command and its time limit

What it writes (six files, flat, as the device tool brings back at most eight, two folders down):

    env.txt          the card (nvidia-smi), onnxruntime's version and providers, torch's, the host
    cuda-tests.txt   `pytest -m cuda -rA` over the files with CUDA tests: each test's outcome, each skip's reason
    cuda-tests.xml   the same as JUnit XML
    gpu.md           benchmarks/gpu.py's table (after each finished section, so a stopped run keeps those)
    gpu.log          gpu.py's stderr (the time each section took, a traceback if one broke)
    summary.md       each step's outcome and seconds, the test counts and failures, then gpu.md's table

Time: --budget-s (default 450 s) is the whole run's, the installation device.sh does before it not counted. The
tests get at most --tests-s (150 s); the benchmark gets what is left as a hard limit, and gpu.py is told to start
no section in the last --reserve-s (120 s) of it, so that a section begun in time can end. A step that reaches its
limit is interrupted (SIGINT, as ^C: pytest then writes what ran, its JUnit XML too) and killed if it has not
ended within 20 s, and the summary says so. onnxruntime's CUDA graphs (`generate --cuda-graph`) are in both steps:
tests/gpu/test_decode_graph.py's CUDA tests and a decode row of their own in gpu.py.

Where onnxruntime-genai imports, PSEUDOFORMER_GENAI_PYTHON is set to this Python for the tests (the genai-cuda
folder tests need it). The exit code is 0 when every test passed or skipped and every step ended in its time.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from common.harness import machine_summary

ROOT = Path(__file__).resolve().parents[1]
# The files that hold CUDA tests (`pytest -m cuda` over these alone: collecting the whole suite imports TVM,
# torch's backends and the viewer for nothing); tests/benchmarks/test_gpu_session.py checks the list is whole.
# In the order they run: the genai-cuda folders last (each builds a folder and starts genai), so that the tests
# stopped at --tests-s, if any, are theirs.
CUDA_TESTS = ("tests/backends/test_onnx_cuda.py", "tests/backends/test_onnx_runner.py",
              "tests/gpu/test_provider.py", "tests/gpu/test_generate_float16.py", "tests/gpu/test_decode_graph.py",
              "tests/gpu/test_training_device.py", "tests/gpu/test_training_precision.py",
              "tests/training/test_training_vs_torch.py", "tests/gpu/test_genai_gpu_folder.py")
FILES = ("env.txt", "cuda-tests.txt", "cuda-tests.xml", "gpu.md", "gpu.log", "summary.md")
GRACE_S = 20.0  # what a step stopped at its limit is given to report what it finished before it is killed
SECTIONS = ("forward", "decode", "train")  # gpu.py's, checked here before any GPU time is spent on the tests


@dataclass
class Step:
    """One command run with a time limit, its output in `log`."""

    name: str
    argv: list[str]
    limit_s: float
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    code: int | None = None  # None: stopped at its limit (or not run)
    note: str = ""

    def run(self) -> None:
        start = time.perf_counter()
        with self.log.open("w") as out:
            proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                    env={**os.environ, **self.env})
            try:
                self.code = proc.wait(timeout=self.limit_s)
            except subprocess.TimeoutExpired:
                # interrupted first, as ^C: pytest then reports the tests that ran (-rA, its JUnit XML) and gpu.py
                # has its finished sections written; killed if it has not ended within GRACE_S
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=GRACE_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                self.note = f"stopped at its limit of {self.limit_s:.0f} s"
        self.seconds = time.perf_counter() - start

    @property
    def outcome(self) -> str:
        if self.note:
            return self.note
        return "ok" if self.code == 0 else f"exit code {self.code}"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=os.environ.get("OUT"),
                    help="the folder to write into (default: $OUT, the device tool's)")
    ap.add_argument("--budget-s", type=float, default=450.0, help="the whole run's seconds (default 450)")
    ap.add_argument("--tests-s", type=float, default=150.0, help="the most the CUDA tests may take (default 150)")
    ap.add_argument("--reserve-s", type=float, default=120.0,
                    help="gpu.py starts no section in the benchmark's last this many seconds (default 120)")
    ap.add_argument("--tests", nargs="+", default=list(CUDA_TESTS), help="the test files (default: every CUDA test's)")
    ap.add_argument("--sections", default="decode,forward,train", help="gpu.py's sections, in the order they run")
    ap.add_argument("--smoke", action="store_true", help="on the CPU: gpu.py --smoke, the CUDA tests skipping")
    ap.add_argument("--dry-run", action="store_true", help="print each step's command and limit, run nothing")
    args = ap.parse_args(argv)
    if args.out is None:
        ap.error("no --out and no $OUT: name the folder to write into")
    unknown = [s for s in args.sections.split(",") if s not in SECTIONS]
    if unknown:
        ap.error(f"--sections: no section {', '.join(unknown)} (choose from {', '.join(SECTIONS)})")
    for name in ("budget_s", "tests_s", "reserve_s"):
        value = getattr(args, name)
        if not (value == value and 0 <= value < float("inf")):
            ap.error(f"--{name.replace('_', '-')} must be a finite number of seconds ≥ 0, not {value}")
    return args


def gpu_here() -> str | None:
    """Why this machine has no GPU for the run, or None when nvidia-smi sees one."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "no nvidia-smi here"
    done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    return None if done.returncode == 0 and "GPU" in done.stdout else "nvidia-smi finds no GPU"


def environment() -> str:
    """What the figures were taken on: the card, the packages, the host."""
    lines = [f"python {platform.python_version()} ({sys.executable})", f"host {platform.node()}"]
    if (smi := shutil.which("nvidia-smi")) is not None:
        done = subprocess.run([smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=60)
        lines.append(f"gpu {done.stdout.strip() or done.stderr.strip()}")
    else:
        lines.append("gpu none (no nvidia-smi)")
    probe = ("import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers()); "
             "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=ROOT)
    lines += done.stdout.strip().splitlines() or [f"packages: {done.stderr.strip()[-300:]}"]
    lines.append(f"cpu {machine_summary()}")
    return "\n".join(lines) + "\n"


def steps(args: argparse.Namespace) -> tuple[Step, Step]:
    out: Path = args.out
    env = {}
    if "PSEUDOFORMER_GENAI_PYTHON" not in os.environ and importlib.util.find_spec("onnxruntime_genai") is not None:
        env["PSEUDOFORMER_GENAI_PYTHON"] = sys.executable  # genai is beside onnxruntime-gpu (device.sh's site)
    tests = Step("cuda tests", [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-rA", "-p", "no:cacheprovider",
                                f"--junitxml={out / 'cuda-tests.xml'}", *args.tests],
                 min(args.tests_s, args.budget_s), out / "cuda-tests.txt", env)
    bench = Step("benchmarks/gpu.py", [sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--out", str(out / "gpu.md"),
                                       "--sections", args.sections, *(["--smoke"] if args.smoke else [])],
                 0.0, out / "gpu.log")
    return tests, bench


def test_counts(xml: Path) -> tuple[str, list[str]]:
    """`N tests: P passed, F failed, E errors, S skipped` from pytest's JUnit XML, and the failing tests' names."""
    if not xml.is_file():
        return "no JUnit XML written", []
    suites = ElementTree.parse(xml).getroot()
    counts = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    failed = []
    for suite in suites.iter("testsuite"):
        for k in counts:
            counts[k] += int(suite.get(k, 0))
        for case in suite.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed.append(f"{case.get('classname')}::{case.get('name')}")
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return (f"{counts['tests']} tests: {passed} passed, {counts['failures']} failed, {counts['errors']} errors, "
            f"{counts['skipped']} skipped"), failed


def summary(args: argparse.Namespace, env: str, done: Sequence[Step], seconds: float) -> str:
    lines = ["# GPU session: CUDA tests and benchmarks/gpu.py", "", "```", env.strip(), "```", "",
             "| step | outcome | seconds | limit |", "|---|---|---|---|"]
    lines += [f"| {s.name} | {s.outcome} | {s.seconds:.0f} | {s.limit_s:.0f} |" for s in done]
    counts, failed = test_counts(args.out / "cuda-tests.xml")
    lines += ["", f"CUDA tests: {counts}."]
    lines += [f"- failed: {name}" for name in failed]
    table = args.out / "gpu.md"
    lines += ["", table.read_text().strip() if table.is_file() else "benchmarks/gpu.py wrote no table.", "",
              f"{seconds:.0f} s in all (budget {args.budget_s:.0f} s)."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    tests, bench = steps(args)
    if args.dry_run:
        bench.limit_s = max(0.0, args.budget_s - tests.limit_s)
        for s in (tests, bench):
            print(f"{s.name} (at most {s.limit_s:.0f} s; env {s.env or 'as given'}): {' '.join(s.argv)}")
        print(f"gpu.py --budget-s: the benchmark's limit less {args.reserve_s:.0f} s; files: {', '.join(FILES)} "
              f"in {args.out}")
        return 0
    if not args.smoke and (why := gpu_here()) is not None:
        print(f"error: {why}: run on the GPU machine (bash .gpu/device.sh python3 benchmarks/gpu_session.py), or "
              "--smoke", file=sys.stderr)
        return 1
    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    env = environment()
    (args.out / "env.txt").write_text(env)
    tests.run()
    done = [tests]
    left = args.budget_s - (time.perf_counter() - start)
    if left < 30:  # less than a section's warm-up: say so rather than start what cannot end
        bench.note = f"not run: {max(left, 0):.0f} s of the budget were left after the tests"
        (args.out / "gpu.log").write_text(bench.note + "\n")
    else:
        bench.limit_s = left
        bench.argv += ["--budget-s", f"{max(left - args.reserve_s, 0.0):.0f}"]
        bench.run()
    done.append(bench)
    text = summary(args, env, done, time.perf_counter() - start)
    (args.out / "summary.md").write_text(text)
    print(text)
    counts, failed = test_counts(args.out / "cuda-tests.xml")
    return 0 if all(s.code == 0 and not s.note for s in done) and not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
