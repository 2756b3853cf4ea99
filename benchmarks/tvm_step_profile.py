#!/usr/bin/env python3
"""Where a TVM decode step's time goes: TVMModel.profile of one step of a shape (random weights, float32 unless
--int4), after a prompt and a few greedy tokens, grouped into products by weights (packed_matmul, matmul_nbits,
matmul_int8), other products (attention's against the cache), other kernels, and the VM's builtins.

    python benchmarks/tvm_step_profile.py --shape smollm2 --prompt 128
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402
from common.harness import common_arguments  # noqa: E402


def group(symbol: str) -> str:
    if symbol.startswith("vm."):
        return "VM builtins"
    if any(w in symbol for w in ("packed_matmul", "matmul_nbits", "matmul_int8")):
        return "products by weights"
    return "other products (attention)" if "matmul" in symbol else "other kernels"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="smollm2")
    ap.add_argument("--prompt", type=int, default=128)
    common_arguments(ap)
    ap.add_argument("--int4", action="store_true", help="--quantize int4 with the embeddings, as bench_int4 does")
    args = ap.parse_args(argv)
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    from common.decoding import SHAPES

    from pseudoformer.generation import Generator, Sampling
    from pseudoformer.model import load
    from pseudoformer.passes.quantize import QuantizeOptions

    path, defines = SHAPES[args.shape]
    model = load(HERE.parent / path, defines=defines, seed=0)
    opts = QuantizeOptions(bits=4, block_size=32, embeddings=True) if args.int4 else None
    gen = Generator(model, backend="tvm", quantize=opts)
    seen: dict[str, Any] = {}
    step = gen.runtime.step  # type: ignore[attr-defined]

    def recording(feed: Any, cache: Any) -> Any:
        seen["inputs"] = gen.runtime.step_inputs(feed, cache)  # type: ignore[attr-defined]
        return step(feed, cache)
    gen.runtime.step = recording  # type: ignore[attr-defined]
    vocab = int(dict(d.split("=") for d in defines)["N_V"])
    prompt = np.random.default_rng(0).integers(0, vocab, (1, args.prompt))
    gen.generate(prompt, max_new_tokens=8, sampling=Sampling(temperature=0))
    compiled, inputs = gen.runtime.step_model, seen["inputs"]  # type: ignore[attr-defined]
    for _ in range(3):
        compiled.run(inputs)
    start = time.perf_counter()
    for _ in range(10):
        compiled.run(inputs)
    wall = (time.perf_counter() - start) / 10
    profile = compiled.profile(inputs, reps=5)
    total = sum(profile.values())
    groups: dict[str, float] = {}
    for symbol, seconds in profile.items():
        groups[group(symbol)] = groups.get(group(symbol), 0.0) + seconds
    print(f"# {args.shape}, one step at {args.prompt + 8} positions, {args.threads} threads, load average "
          f"{os.getloadavg()[0]:.1f}: a plain run {wall * 1e3:.2f} ms, the instrumented calls {total * 1e3:.2f} ms")
    for name, seconds in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"{name}: {seconds * 1e3:.2f} ms ({100 * seconds / total:.0f} %)")
    for symbol, seconds in list(profile.items())[:10]:
        print(f"  {symbol}: {seconds * 1e3:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
