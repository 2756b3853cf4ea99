"""What the scripts that time one TVM decode step share (tvm_vm_calls.py, tvm_kernels_ab.py): their options,
and the feed of one token after a cache of random keys and values."""

from __future__ import annotations

import argparse

import numpy as np

from common.harness import common_arguments


def decode_feed(step: object, past: int, vocab: int) -> dict[str, np.ndarray]:
    """One token for one row, and `past` cached positions of random keys and values, for the step that TVM runs
    (the generator's runtime.step_graph): in buffers of past + 1 positions with the length `past`, or for a step
    that concatenates, those `past` positions alone (the same values: each cache is drawn at past + 1)."""
    rng = np.random.default_rng(0)
    feed = {}
    for n in step.inputs:  # type: ignore[attr-defined]
        name, t = n.attrs["name"], n.type
        if t.dtype.value == "int64":
            feed[name] = rng.integers(0, vocab, (1, 1)) if t.rank else np.array(past, dtype=np.int64)
        else:
            cache = rng.standard_normal([1 if d == "batch" else past + 1 if isinstance(d, str) else d
                                         for d in t.shape]).astype(np.float32)
            feed[name] = cache if "capacity" in t.shape else cache[..., :past, :]
    return feed


def step_arguments(ap: argparse.ArgumentParser, *, blocks: int, runs: int) -> None:
    """The options of a script that times one decode step of a shape: --shape, --past, --blocks, --runs,
    --threads (this one's and tvm_kernels_ab.py's)."""
    ap.add_argument("--shape", default="smollm2")
    ap.add_argument("--past", type=int, default=128)
    ap.add_argument("--blocks", type=int, default=blocks)
    ap.add_argument("--runs", type=int, default=runs)
    common_arguments(ap)
