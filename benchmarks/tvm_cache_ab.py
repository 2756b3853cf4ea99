#!/usr/bin/env python3
"""TVM's decode with its cache in buffers that the attention kernel appends to in place (passes/kv_buffers.py, the
generator's step) against the step that concatenates its cache (a new present every token, concat_kernel.py), in
one process, from one quantized graph: the same kernels but the cache's, generations interleaved in rounds.

A prompt of --prompt random ids, --new greedy tokens, one row; reported: the median over rounds of each
generation's median time per token, and of its prefill. The greedy tokens must agree.

    python benchmarks/tvm_cache_ab.py --shape smollm2 --contender tvm8
    python benchmarks/tvm_cache_ab.py --shape tiny --rounds 2         # a smoke run
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402
from common.decoding import ROOT, SHAPES  # noqa: E402
from common.harness import decode_arguments, interleaved, machine_summary  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="smollm2")
    ap.add_argument("--contender", choices=["tvm8", "tvm", "fp32"], default="tvm",
                    help="int4 with int8 activations, int4 computing in float32, or float32 weights")
    decode_arguments(ap, new=16, rounds=5)
    args = ap.parse_args(argv)
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # before TVM starts its pool
    from pseudoformer.generation import Generator, Sampling
    from pseudoformer.generation.tvm_runtime import TvmRuntime
    from pseudoformer.model import load
    from pseudoformer.passes.quantize import QuantizeOptions

    path, defines = SHAPES[args.shape]
    vocab = int(dict(d.split("=") for d in defines)["N_V"])
    opts = None if args.contender == "fp32" else QuantizeOptions(bits=4, block_size=32, embeddings=True,
                                                                    accuracy_level=4)
    int8 = args.contender == "tvm8"
    gen = Generator(load(ROOT / path, defines=defines, seed=0), backend="tvm", quantize=opts, int8_activations=int8)
    runtimes = {"buffers": gen.runtime,
                "concatenated": TvmRuntime(gen.decoder, gen.output, gen.weights, int8_activations=int8,  # type: ignore[arg-type]
                                           cache_buffers=False)}
    assert runtimes["buffers"].buffered is not None, "the step in buffers was not made"  # type: ignore[attr-defined]
    prompt = np.random.default_rng(0).integers(0, vocab, (1, args.prompt))
    tokens: dict[str, list[int]] = {}

    def run(name: str) -> tuple[float, float]:
        gen.runtime = runtimes[name]
        g = gen.generate(prompt, max_new_tokens=args.new, sampling=Sampling(temperature=0))
        tokens[name] = g.tokens[0]
        return g.prefill_seconds, statistics.median(g.step_seconds)

    print(f"# tvm_cache_ab: {args.shape}, {args.contender}, prompt {args.prompt}, {args.new} new tokens, "
          f"{args.threads} threads, medians of {args.rounds} rounds, on {machine_summary()}\n")
    times = interleaved({name: (lambda n=name: run(n)) for name in runtimes}, reps=args.rounds, gap_s=0.3)
    assert tokens["buffers"] == tokens["concatenated"], tokens
    print("| cache | per token (ms) | prefill (ms) |\n|---|---|---|")
    med = {n: (statistics.median(t[1] for t in ts), statistics.median(t[0] for t in ts)) for n, ts in times.items()}
    for name, (step, prefill) in med.items():
        print(f"| {name} | {step * 1e3:.2f} | {prefill * 1e3:.0f} |")
    b, c = med["buffers"], med["concatenated"]
    print(f"\nbuffers ÷ concatenated: per token {b[0] / c[0]:.2f}, prefill {b[1] / c[1]:.2f}; "
          f"load average now {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
