"""Timing several ONNX Runtime sessions against each other on a shared 2-core machine.

Run by run round-robin, one session's spinning worker threads compete with the next session's
run, and figures of ~1 ms ops contradict each other between runs. So the variants alternate in
blocks: a few warm-up runs, then `runs` timed runs of one session in a tight loop. The figure per
variant is the median over blocks of each block's mean.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping


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
