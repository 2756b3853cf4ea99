"""Checks on a model's parameters: that they fit in memory before they are allocated, and that the
weights a checkpoint gave them are finite numbers."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from pseudoformer.base.errors import UsageError
from pseudoformer.base.limits import available_memory, show_bytes
from pseudoformer.ir import Graph
from pseudoformer.ir.lazy_tensor import LazyTensor

Expected = Mapping[str, tuple[tuple[int, ...], str]]


# What a streaming compile holds besides its tensors: the interpreter, numpy, onnx and the graph.
STREAMING_BASE = 1 << 30


def check_memory(graph: Graph, expected: Expected, *, streaming: bool = False, resident: int = 0) -> None:
    """Refuse parameters that cannot fit in memory before allocating them (or reading a checkpoint),
    naming the largest and the hyperparameters that size them.

    `streaming`: the parameters are read one at a time (LazyTensors, load(lazy_weights=True)), so what
    must fit is the streaming peak, STREAMING_BASE and twice the largest tensor (the one read and the
    one made from it), plus `resident`: the bytes kept once written (a generator's session holds its
    weights file)."""
    nbytes = {name: math.prod(shape) * np.dtype(dtype).itemsize for name, (shape, dtype) in expected.items()}
    biggest = sorted(nbytes, key=lambda n: -nbytes[n])[:3]
    total, avail = sum(nbytes.values()), available_memory()
    if streaming:
        need = STREAMING_BASE + 2 * (nbytes[biggest[0]] if biggest else 0) + resident
        what = (f"streamed one tensor at a time, the parameters of {graph.meta.get('entry')} need "
                f"{show_bytes(need)}" + (f" ({show_bytes(resident)} of them kept)" if resident else ""))
    else:
        need = total
        what = f"the parameters of {graph.meta.get('entry')} take {show_bytes(total)}"
    if avail is None or need <= avail:
        return
    sizes = {int(d) for n in biggest for d in expected[n][0]}
    hyper = {k: v for k, v in graph.meta.get("hyperparameters", {}).items() if v in sizes and not isinstance(v, bool)}
    shown = ", ".join(f"{n} {list(expected[n][0])}" for n in biggest)
    raise UsageError(f"{what}, more than the {show_bytes(avail)} of memory available (largest: {shown}; "
                     f"{', '.join(f'{k} = {v:,}' for k, v in sorted(hyper.items()))})")


def _not_finite(name: str, a: np.ndarray) -> str | None:
    # min and max propagate NaN and reach ±∞ without a temporary array the size of the tensor
    if a.size and not (np.isfinite(a.min()) and np.isfinite(a.max())):
        nan, inf = int(np.isnan(a).sum()), int(np.isinf(a).sum())
        return f"{name} ({', '.join(f'{n:,} {w}' for n, w in ((nan, 'NaN'), (inf, '±∞')) if n)})"
    return None


def _refuse(bad: list[str], source: str | Path) -> UsageError:
    shown = ", ".join(bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
    return UsageError(f"weights {source} hold values that are not finite numbers: {shown}; "
                      "--allow-nonfinite loads them anyway")


def _checked(name: str, lazy: LazyTensor, source: str | Path) -> LazyTensor:
    def compute() -> np.ndarray:
        a = lazy.load()
        why = _not_finite(name, a)
        if why is not None:
            raise _refuse([why], source)
        return a

    return dataclasses.replace(lazy, compute=compute)  # a LazyBlockCoded keeps its codes


def check_finite(params: Mapping[str, np.ndarray | LazyTensor], source: str | Path,
                 ) -> dict[str, np.ndarray | LazyTensor]:
    """Refuse weights holding NaN or ±∞, naming each tensor that does: a model computing with them
    gives NaN everywhere, far from the cause. Arrays are checked now; a LazyTensor is checked when it
    is loaded (reading a 7B checkpoint twice to check it first would double the compile's reading),
    and the refusal then ends the write that loaded it, which leaves nothing behind (save.py)."""
    bad = [why for name, a in sorted(params.items())
           if not isinstance(a, LazyTensor) and (why := _not_finite(name, a)) is not None]
    if bad:
        raise _refuse(bad, source)
    return {name: _checked(name, a, source) if isinstance(a, LazyTensor) else a for name, a in params.items()}
