"""The harness every benchmark script uses: its shared flags, the machine a figure was taken on, and the
timing of several variants against each other on a shared machine, interleaved, so that a change in the
machine's load falls on every variant alike rather than on whichever ran then.

Standard library only: the scripts that run in another environment (genai_timing.py in onnxruntime-genai's
venv, llamacpp_timing.py in llama-cpp-python's) import it too.

The whole API:

- `common_arguments(parser, threads=2)`: adds `--threads N` (the threads of every runtime a script times;
  `threads=None`: each runtime's own default).
- `machine_facts(*packages)`: a dict of the CPU (`model name` in /proc/cpuinfo), logical CPUs, AVX-512,
  load average, Python, the pseudoformer commit and the versions of the named packages (read from their
  installed metadata, nothing imported). `machine_summary()`: the one line a script prints above its table.
- `round_robin(calls, reps=…)`: each round runs every variant once (`interleaved`: the same rounds, giving
  what each call returned, for variants that time themselves), for whole-model runs (bench_cpu.py,
  bench_tvm.py), with an idle gap before each timed call: ORT's and OpenMP's worker threads spin on for tens
  of milliseconds after a run and would slow whatever runs next (TVM's first run after ORT's: 30 ms instead
  of 1 on a toy model).
- `block_times(calls, blocks=…, runs=…)` and `block_medians(…)`: the variants alternate in blocks of a
  tight loop, for ops of ~1 ms on a 2-core machine: run by run round-robin, one session's spinning worker
  threads compete with the next session's run, and the figures contradict each other between runs. Each
  block is a few warm-up runs, then `runs` timed runs of one variant; `block_times` gives each block's mean
  per variant, `block_medians` their median.

A script imports this and the modules of `benchmarks/common/`, never another script.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def common_arguments(parser: argparse.ArgumentParser, *, threads: int | None = 2) -> argparse.ArgumentParser:
    """`parser` with the flags every script shares (`--threads`); returns it."""
    default = f"default {threads}" if threads is not None else "default: each runtime's own"
    parser.add_argument("--threads", type=int, default=threads,
                        help=f"threads of every runtime timed: torch, ORT intra-op, TVM ({default})")
    return parser


def decode_arguments(parser: argparse.ArgumentParser, *, new: int = 32, rounds: int = 5,
                     rounds_help: str = "timed rounds") -> argparse.ArgumentParser:
    """`parser` with a generation benchmark's flags (--prompt, --new, --rounds) and the common ones; returns it."""
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens (default 128)")
    parser.add_argument("--new", type=int, default=new, help=f"tokens generated after it (default {new})")
    parser.add_argument("--rounds", type=int, default=rounds, help=f"{rounds_help} (default {rounds})")
    return common_arguments(parser)


def training_arguments(parser: argparse.ArgumentParser, *, batch: int = 4, steps: int = 3,
                       steps_help: str = "timed steps",
                       layers_help: str = "fewer layers than the workload's (say so when reporting)"
                       ) -> argparse.ArgumentParser:
    """`parser` with a training step's sizes (--batch, --seq, --layers), --steps and the common flags; returns it."""
    parser.add_argument("--batch", type=int, default=batch, help=f"rows a step (default {batch})")
    parser.add_argument("--seq", type=int, default=128, help="tokens a row (default 128)")
    parser.add_argument("--layers", type=int, help=layers_help)
    parser.add_argument("--steps", type=int, default=steps, help=f"{steps_help} (default {steps})")
    return common_arguments(parser)


def decode_flags(args: argparse.Namespace, *, rounds: int | None = None, threads: int | None = None) -> list[str]:
    """decode_arguments' flags as `args` holds them, for a timing script run in another venv (genai_timing.py,
    llamacpp_timing.py): `rounds` and `threads` where the caller's differ."""
    return ["--prompt", str(args.prompt), "--new", str(args.new), "--threads", str(threads or args.threads),
            "--rounds", str(rounds if rounds is not None else args.rounds)]


def _cpuinfo() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/cpuinfo").read_text()
    return ""


def machine_facts(*packages: str) -> dict[str, Any]:
    """What a figure needs beside it: the CPU, its cores and load, and the software it ran."""
    info = _cpuinfo()
    cpu = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")),
               platform.processor() or platform.machine())
    commit = ""
    with contextlib.suppress(Exception):
        commit = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
    facts: dict[str, Any] = {
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "avx512f": "avx512f" in info,
        "loadavg_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "pseudoformer_commit": commit,
    }
    for name in packages:
        try:
            facts[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            facts[name] = None
    return facts


def machine_summary() -> str:
    """One line: the CPU, its logical CPUs, the load average now and the commit."""
    f = machine_facts()
    load = f["loadavg_at_start"][0] if f["loadavg_at_start"] else float("nan")
    return f"{f['cpu']}, {f['logical_cpus']} CPUs, load average {load:.1f}, commit {f['pseudoformer_commit'] or '?'}"


def interleaved(calls: Mapping[str, Callable[[], T]], *, reps: int, warmup: int = 1, gap_s: float = 0.0,
                rotate: bool = True) -> dict[str, list[T]]:
    """What every timed call of each of `calls` returned, by name, in rounds as `round_robin`'s: for variants
    that time themselves (a generation returning its prefill and step seconds)."""
    names = list(calls)
    for _ in range(warmup):
        for n in names:
            calls[n]()
    results: dict[str, list[T]] = {n: [] for n in names}
    for r in range(reps):
        k = r % len(names) if rotate else 0
        for n in names[k:] + names[:k]:
            if len(names) > 1:
                time.sleep(gap_s)
            results[n].append(calls[n]())
    return results


def round_robin(calls: Mapping[str, Callable[[], object]], *, reps: int, warmup: int = 1, gap_s: float = 0.0,
                rotate: bool = True) -> dict[str, list[float]]:
    """Seconds of every timed call of each of `calls`, by name: `warmup` untimed rounds, then `reps` rounds.

    With `rotate`, round r starts at variant r (mod their number), so that no variant always follows the
    same neighbour. The `gap_s` pause before each timed call is left out when there is one variant: then
    there is no other variant's threads to wait for.
    """
    def timed(call: Callable[[], object]) -> Callable[[], float]:
        def seconds() -> float:
            t = time.perf_counter()
            call()
            return time.perf_counter() - t
        return seconds

    return interleaved({n: timed(c) for n, c in calls.items()}, reps=reps, warmup=warmup, gap_s=gap_s, rotate=rotate)


def block_times(calls: Mapping[str, Callable[[], object]], *, blocks: int, runs: int, warmup: int = 3,
                gap_s: float = 0.0) -> dict[str, list[float]]:
    """Seconds per call of each of `calls`, by name, one figure per block (the block's mean).

    `gap_s` pauses before each block: onnxruntime's worker threads spin on after its runs and take the cores
    TVM's pool is waiting for (6 ms for a 10 µs product, measured)."""
    per_block: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(blocks):
        for name, call in calls.items():
            if gap_s:
                time.sleep(gap_s)
            for _ in range(warmup):
                call()
            start = time.perf_counter()
            for _ in range(runs):
                call()
            per_block[name].append((time.perf_counter() - start) / runs)
    return per_block


def block_medians(calls: Mapping[str, Callable[[], object]], *, blocks: int, runs: int, warmup: int = 3,
                  gap_s: float = 0.0) -> dict[str, float]:
    """Seconds per call of each of `calls`, by name: the median over blocks of each block's mean."""
    return {name: statistics.median(t)
            for name, t in block_times(calls, blocks=blocks, runs=runs, warmup=warmup, gap_s=gap_s).items()}
