#!/usr/bin/env python3
"""Peak memory of building TVM's int4 generator, stage by stage: where a build holds what.

Builds `Generator(model, backend="tvm", quantize=int4)` (bench_int4.py's tvm/tvm8 contender) from a bf16
checkpoint (scale_checkpoints.py) or from random float32 weights, and wraps each stage of the build so
that the process's peak resident set (VmHWM, reset before the stage through /proc/self/clear_refs) and,
with --tracemalloc, the peak of Python's and numpy's own allocations are taken per stage:

    load              pseudoformer.load: the checkpoint bound (LazyTensors with --lazy) or random weights
    model passes      -O2 and the quantize pass (backends/pipeline.run, the Generator's)
    tvm passes        build.prepare: decompose, fold_constants, the 4-bit codes in Q4_0's nibble order
    lower             build.to_relax
    int8 layout       nbits_int8.int8_weights (--int8: the rows-of-16 copies of the codes)
    pack fp32         packing.pack_matmul_weights
    tvm.compile       the Relax pipeline and LLVM
    weights to TVM    TVMModel._param_args: the arrays TVM's kernels read
    generate          a prompt of 16, 2 new tokens

    python benchmarks/tvm_build_memory.py --checkpoint CK_DIR --alg models/qwen2.alg --lazy --int8
    python benchmarks/tvm_build_memory.py --shape qwen0.5b --int8          # random float32 weights

The peak of a stage is the highest RSS reached while it ran (the memory held before it counts too);
"held after" is the RSS when it returned.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
from common.harness import machine_summary  # noqa: E402

ROWS: list[str] = []
_OPEN: list[list[float]] = []  # per stage running, the peaks of the stages run inside it (each reset VmHWM)


def status(field: str) -> float:
    """A VmXXX field of /proc/self/status, in GB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024 / 1e9
    return float("nan")


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux ≥ 4.0)
    if tracemalloc.is_tracing():
        tracemalloc.reset_peak()


def stage(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapped(*a: Any, **k: Any) -> Any:
        before = status("VmRSS")
        reset_peak()
        _OPEN.append([])
        t0 = time.perf_counter()
        try:
            out = fn(*a, **k)
        finally:
            inner = _OPEN.pop()
        seconds = time.perf_counter() - t0
        peak = max([status("VmHWM"), *inner])
        if _OPEN:
            _OPEN[-1].append(peak)
        traced = f" | {tracemalloc.get_traced_memory()[1] / 1e9:.2f}" if tracemalloc.is_tracing() else ""
        ROWS.append(f"| {name} | {before:.2f} | {peak:.2f} | {status('VmRSS'):.2f}{traced} | {seconds:.1f} |")
        print(ROWS[-1], flush=True)
        return out
    return wrapped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, help="a HF checkpoint directory (scale_checkpoints.py)")
    ap.add_argument("--alg", default="models/qwen2.alg")
    ap.add_argument("--shape", help="common/decoding.py's SHAPES' shape, with random float32 weights (no --checkpoint)")
    ap.add_argument("--lazy", action="store_true", help="load(lazy_weights=True): the checkpoint read tensor by tensor")
    ap.add_argument("--int8", action="store_true", help="int8 activations (the tvm8 contender)")
    ap.add_argument("--quantize-method", choices=["balanced", "mse", "rtn"], default="balanced")
    ap.add_argument("--tracemalloc", action="store_true", help="also the peak of Python's and numpy's allocations")
    args = ap.parse_args()
    if args.tracemalloc:
        tracemalloc.start()

    import pseudoformer.backends.pipeline as pipeline
    import pseudoformer.backends.tvm.build as build
    import pseudoformer.model as model_mod
    from pseudoformer.generation import Generator, Sampling
    from pseudoformer.passes.quantize import QuantizeOptions

    pipeline.run = stage("model passes (quantize)", pipeline.run)  # the Generator imports it when it runs
    build.prepare = stage("tvm passes", build.prepare)
    build.to_relax = stage("lower", build.to_relax)
    build.int8_weights = stage("int8 layout", build.int8_weights)
    build.pack_matmul_weights = stage("pack fp32", build.pack_matmul_weights)
    build.tvm.compile = stage("tvm.compile", build.tvm.compile)
    made = stage("weights to TVM", build.TVMModel._param_args)
    cached = build.TVMModel._param_args
    build.TVMModel._param_args = lambda self: made(self) if self._params is None else cached(self)  # the first only
    opts = QuantizeOptions(bits=4, block_size=32, embeddings=True, accuracy_level=4, method=args.quantize_method)
    print(f"# {machine_summary()}")
    print(f"# {args}; VmRSS at start {status('VmRSS'):.2f} GB")
    header = "| stage | RSS before, GB | peak RSS, GB | held after, GB" + (" | tracemalloc peak, GB" if args.tracemalloc
                                                                         else "") + " | seconds |"
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    load = stage("load", model_mod.load)
    if args.checkpoint is not None:
        kw = {"lazy_weights": True} if args.lazy else {}
        model = load(ROOT / args.alg, weights=args.checkpoint, **kw)
    else:
        from common.decoding import SHAPES

        path, defines = SHAPES[args.shape]
        model = load(ROOT / path, defines=defines, seed=0)
    gen = stage("generator (all of the above)", Generator)(model, backend="tvm", quantize=opts,
                                                         int8_activations=args.int8)
    model.weights.clear()
    prompt = np.random.default_rng(0).integers(0, 1000, (1, 16))
    stage("generate", gen.generate)(prompt, max_new_tokens=2, sampling=Sampling(temperature=0))
    print(f"# VmHWM is per stage (reset before each); VmRSS at the end {status('VmRSS'):.2f} GB")
    if tracemalloc.is_tracing():
        print(f"# Python's and numpy's allocations held at the end: {tracemalloc.get_traced_memory()[0] / 1e9:.2f} GB")
    import ctypes

    ctypes.CDLL("libc.so.6").malloc_trim(0)  # what the C allocator kept of memory already freed goes back
    print(f"# VmRSS after malloc_trim(0): {status('VmRSS'):.2f} GB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
