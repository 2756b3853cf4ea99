"""Checks on a model's parameters: that they fit in memory before they are allocated, and that the
weights a checkpoint gave them are finite numbers."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from pseudoformer.errors import UsageError
from pseudoformer.ir import Graph
from pseudoformer.limits import available_memory, show_bytes

Expected = Mapping[str, tuple[tuple[int, ...], str]]


def check_memory(graph: Graph, expected: Expected) -> None:
    """Refuse parameters that cannot fit in memory before allocating them (or reading a checkpoint),
    naming the largest and the hyperparameters that size them."""
    nbytes = {name: math.prod(shape) * np.dtype(dtype).itemsize for name, (shape, dtype) in expected.items()}
    total, avail = sum(nbytes.values()), available_memory()
    if avail is None or total <= avail:
        return
    biggest = sorted(nbytes, key=lambda n: -nbytes[n])[:3]
    sizes = {int(d) for n in biggest for d in expected[n][0]}
    hyper = {k: v for k, v in graph.meta.get("hyperparameters", {}).items() if v in sizes and not isinstance(v, bool)}
    shown = ", ".join(f"{n} {list(expected[n][0])}" for n in biggest)
    raise UsageError(f"the parameters of {graph.meta.get('entry')} take {show_bytes(total)}, more than the "
                     f"{show_bytes(avail)} of memory available (largest: {shown}; "
                     f"{', '.join(f'{k} = {v:,}' for k, v in sorted(hyper.items()))})")


def check_finite(params: Mapping[str, np.ndarray], source: str | Path) -> None:
    """Refuse weights holding NaN or ±∞, naming each tensor that does: a model computing with them
    gives NaN everywhere, far from the cause."""
    bad = []
    for name, a in sorted(params.items()):
        # min and max propagate NaN and reach ±∞ without a temporary array the size of the tensor
        if a.size and not (np.isfinite(a.min()) and np.isfinite(a.max())):
            nan, inf = int(np.isnan(a).sum()), int(np.isinf(a).sum())
            bad.append(f"{name} ({', '.join(f'{n:,} {w}' for n, w in ((nan, 'NaN'), (inf, '±∞')) if n)})")
    if bad:
        shown = ", ".join(bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
        raise UsageError(f"weights {source} hold values that are not finite numbers: {shown}; "
                         "--allow-nonfinite loads them anyway")
