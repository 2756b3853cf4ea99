#!/usr/bin/env python3
"""The Relax VM's per-step overhead in a TVM decode step: calls of kernels and of VM builtins, and the time a step.

One decode step of a shape (common/decoding.py's SHAPES, random weights) as the generator compiles it (tvm_runtime.py): one
new token for one row after `--past` cached positions. Counted by the VM's instrument (TVMModel.call_counts), so
the same on every machine whatever its load:
  main         the step with every size symbolic (batch, new positions, cache length), as prefill runs it;
  specialised  the same step with batch and new positions fixed at 1 (backends/tvm/specialise.py): the function a
               one-row decode step runs.
Timed, interleaved in blocks (common/harness.py's block_medians), the step three ways: main with the cache passed
as numpy arrays (copied in and out each call), main with the cache kept in TVM tensors, and specialised with it.

    python benchmarks/tvm_vm_calls.py --shape smollm2 --contender tvm8
    python benchmarks/tvm_vm_calls.py --shape tiny --blocks 3        # a smoke run
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402
from common.decoding import ROOT, SHAPES  # noqa: E402
from common.harness import block_medians, machine_summary  # noqa: E402
from common.tvm_step import decode_feed, step_arguments  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    step_arguments(ap, blocks=9, runs=20)
    ap.add_argument("--contender", choices=["tvm8", "tvm", "fp32"], default="tvm8",
                    help="int4 with int8 activations, int4 computing in float32, or float32 weights")
    args = ap.parse_args(argv)
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # before TVM starts its pool
    import tvm

    from pseudoformer.backends.tvm.specialise import SPECIALISED
    from pseudoformer.generation import Generator
    from pseudoformer.model import load
    from pseudoformer.passes.quantize import QuantizeOptions

    path, defines = SHAPES[args.shape]
    vocab = int(dict(d.split("=") for d in defines)["N_V"])
    model = load(ROOT / path, defines=defines, seed=0)
    opts = None if args.contender == "fp32" else QuantizeOptions(bits=4, block_size=32, embeddings=True,
                                                                    accuracy_level=4)
    gen = Generator(model, backend="tvm", quantize=opts, int8_activations=args.contender == "tvm8")
    step = gen.runtime.step_model  # type: ignore[attr-defined]
    feed = decode_feed(gen.runtime.step_graph, args.past, vocab)  # type: ignore[attr-defined]
    print(f"# tvm_vm_calls: {args.shape}, {args.contender}, one token after {args.past} positions, on {machine_summary()}")
    print()
    print("| function | calls | kernels | VM builtins | make_shape | alloc_tensor | alloc_storage | reshape (views) |"
          " null_value (kills) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for function in ("main", SPECIALISED):
        c = step.call_counts(feed, function=function)
        builtins = sum(v for k, v in c.items() if k.startswith("vm."))
        cells = [c.get(f"vm.builtin.{k}", 0) for k in ("make_shape", "alloc_tensor", "alloc_storage", "reshape",
                                                       "null_value")]
        print(f"| {function} | {sum(c.values())} | {sum(c.values()) - builtins} | {builtins} | "
              + " | ".join(str(x) for x in cells) + " |")
    print()
    keep = gen.runtime._cache_outputs  # type: ignore[attr-defined]
    on_device = {k: tvm.runtime.tensor(v) if v.dtype == np.float32 else v for k, v in feed.items()}  # the cache
    calls = {"main, numpy cache": lambda: step.run(feed, function="main"),
             "main, TVM cache": lambda: step.run(on_device, keep=keep, function="main"),
             "specialised, TVM cache": lambda: step.run(on_device, keep=keep, function=SPECIALISED)}
    times = block_medians(calls, blocks=args.blocks, runs=args.runs)
    base = times["main, numpy cache"]
    print("| step | ms (median of block means) | ÷ main, numpy cache |")
    print("|---|---|---|")
    for name, t in times.items():
        print(f"| {name} | {t * 1e3:.2f} | {t / base:.2f} |")
    print(f"\n# done; load average now {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
