"""Timing several variants against each other on a shared machine, interleaved, so that a change in the
machine's load falls on every variant alike rather than on whichever ran then.

- `round_robin`: each round runs every variant once. For whole-model runs (bench_cpu.py, bench_tvm.py),
  with an idle gap before each timed call: ORT's and OpenMP's worker threads spin on for tens of
  milliseconds after a run and would slow whatever runs next (TVM's first run after ORT's: 30 ms
  instead of 1 on a toy model).
- `block_medians`: the variants alternate in blocks of a tight loop. For ops of ~1 ms on a 2-core
  machine: run by run round-robin, one session's spinning worker threads compete with the next
  session's run, and the figures contradict each other between runs. Each block is a few warm-up
  runs, then `runs` timed runs of one variant; the figure per variant is the median over blocks of
  each block's mean.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping


def round_robin(calls: Mapping[str, Callable[[], object]], *, reps: int, warmup: int = 1, gap_s: float = 0.0,
                rotate: bool = True) -> dict[str, list[float]]:
    """Seconds of every timed call of each of `calls`, by name: `warmup` untimed rounds, then `reps` rounds.

    With `rotate`, round r starts at variant r (mod their number), so that no variant always follows the
    same neighbour. The `gap_s` pause before each timed call is left out when there is one variant: then
    there is no other variant's threads to wait for.
    """
    names = list(calls)
    for _ in range(warmup):
        for n in names:
            calls[n]()
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(reps):
        k = r % len(names) if rotate else 0
        for n in names[k:] + names[:k]:
            if len(names) > 1:
                time.sleep(gap_s)
            t = time.perf_counter()
            calls[n]()
            times[n].append(time.perf_counter() - t)
    return times


def block_medians(calls: Mapping[str, Callable[[], object]], *, blocks: int, runs: int, warmup: int = 3
                  ) -> dict[str, float]:
    """Seconds per call of each of `calls`, by name."""
    per_block: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(blocks):
        for name, call in calls.items():
            for _ in range(warmup):
                call()
            start = time.perf_counter()
            for _ in range(runs):
                call()
            per_block[name].append((time.perf_counter() - start) / runs)
    return {name: statistics.median(t) for name, t in per_block.items()}
