#!/usr/bin/env python3
"""CPU time of a TVM decode step on one thread: a figure that a shared, loaded machine distorts far less than
wall time (the thread's own seconds, not the time it waited for a core), for comparing two checkouts.

SmolLM2-135M's shape by default (--shape: common/decoding.py's SHAPES, random weights), a prompt of 128 random ids and `--new` greedy tokens,
TVM_NUM_THREADS=1; the CPU seconds of each step (time.process_time around the runtime's step), median per
round. Run it once per checkout, at the same time, from outside both (so that neither's folder is the current
directory): `--root` is the checkout whose pseudoformer is imported: this repository (its editable install
maps the rest) or a folder holding the whole package (pseudoformer/ with backends/, ir/, passes/ ... inside
it, and benchmarks/ and models/ beside it), e.g. an older commit's `git archive`.

    python benchmarks/tvm_step_cpu_time.py --root /path/to/checkout --contender tvm8
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from common.decoding import SHAPES
from common.harness import machine_summary


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--shape", default="smollm2")
    ap.add_argument("--contender", choices=["tvm8", "fp32"], default="tvm8")
    ap.add_argument("--new", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args(argv)
    os.environ["TVM_NUM_THREADS"] = "1"  # one thread: its CPU time is the step's work and overhead
    sys.path[:0] = [str(args.root / "benchmarks"), str(args.root)]
    import numpy as np

    from pseudoformer.generation import Generator, Sampling
    from pseudoformer.model import load
    from pseudoformer.passes.quantize import QuantizeOptions

    path, defines = SHAPES[args.shape]
    vocab = int(dict(d.split("=") for d in defines)["N_V"])
    model = load(args.root / path, defines=defines, seed=0)
    if args.contender == "tvm8":
        opts = QuantizeOptions(bits=4, block_size=32, embeddings=True, accuracy_level=4)
        gen = Generator(model, backend="tvm", quantize=opts, int8_activations=True)
    else:
        gen = Generator(model, backend="tvm")
    runtime = gen.runtime
    seconds: list[float] = []
    step = runtime.step

    def timed(feed: object, cache: object) -> object:
        start = time.process_time()
        out = step(feed, cache)
        seconds.append(time.process_time() - start)
        return out

    runtime.step = timed  # type: ignore[method-assign]  (prefill calls it too: the first of each round)
    prompt = np.random.default_rng(0).integers(0, vocab, (1, 128))
    print(f"# {args.contender} from {args.root}, on {machine_summary()}")
    for r in range(args.rounds):
        seconds.clear()
        out = gen.generate(prompt, max_new_tokens=args.new, sampling=Sampling(temperature=0))
        print(f"round {r}: CPU {statistics.median(seconds[1:]) * 1e3:.2f} ms a step, "
              f"wall {statistics.median(out.step_seconds) * 1e3:.1f} ms", flush=True)
    print(f"# done; load average now {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
