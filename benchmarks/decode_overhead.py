#!/usr/bin/env python3
"""What a decode step costs outside onnxruntime's kernels: the generator's loop profiled by onnxruntime.

A Generator (--backend onnx, `--contrib-ops` unless --standard) on a random checkpoint of SmolLM2-135M's shape
(bench_llama.make_checkpoint; --quick: a tiny Llama), its step session replaced by a profiling one of the same
file (llama_profile.profile_ours does the same), generates greedily from a prompt of --prompt random ids. For
each decode step (every model run after the prefill) three times are set side by side:

  wall     the loop's time per token: the whole generation less its prefill, over the steps (Python, the
           token and length written, the run, the greedy ArgMax session, the ids read back)
  run      onnxruntime's `model_run` event: the session's run, from its call to its return
  kernels  the sum of the run's `*_kernel_time` node events: the kernels themselves

wall − kernels is what a step spends outside the kernels; run − kernels the part inside onnxruntime's run
(its executor, thread-pool hand-offs), wall − run the part in Python and the binding calls. Medians over
steps, then over --rounds generations (the first one warms up and is dropped).

    python benchmarks/decode_overhead.py                       # SmolLM2-135M's shape, fp32, --contrib-ops
    python benchmarks/decode_overhead.py --quantize int4       # int4 (MatMulNBits)
    python benchmarks/decode_overhead.py --quick               # a tiny Llama: a smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from common.decoding import make_checkpoint
from common.harness import decode_arguments, machine_summary

ROOT = Path(__file__).resolve().parents[1]


def step_times(trace: Path) -> list[tuple[float, float]]:
    """(run ms, kernels ms) of every model run but the first (the prefill) in an onnxruntime trace."""
    events = json.loads(Path(trace).read_text())
    runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])
    kernels = [0.0] * len(runs)
    starts = [r["ts"] for r in runs]
    for e in events:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time"):
            continue
        i = next((k for k in range(len(runs) - 1, -1, -1) if starts[k] <= e["ts"]), None)
        if i is not None and e["ts"] <= runs[i]["ts"] + runs[i]["dur"]:
            kernels[i] += e["dur"] / 1e3
    return [(r["dur"] / 1e3, k) for r, k in zip(runs[1:], kernels[1:], strict=True)]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    decode_arguments(ap, rounds=3)
    ap.add_argument("--quantize", choices=["int4"], default=None)
    ap.add_argument("--standard", action="store_true", help="standard ONNX ops (the cache concatenated each step)")
    ap.add_argument("--checkpoint", type=Path, help="a checkpoint directory to reuse (made in a temporary one otherwise)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)

    import onnxruntime as ort

    from pseudoformer.generation import Generator, Sampling
    from pseudoformer.model import load
    from pseudoformer.passes.quantize import QuantizeOptions

    quantize = QuantizeOptions(bits=4, block_size=32, embeddings=True) if args.quantize else None
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = args.checkpoint or Path(tmp) / "checkpoint"
        if not (ckpt / "config.json").exists():
            make_checkpoint(ckpt, args.quick)
        model = load(str(ROOT / "models" / "llama.alg"), weights=ckpt)
        gen = Generator(model, backend="onnx", threads=args.threads, contrib_ops=not args.standard,
                        quantize=quantize, keep_weights=False)
        runtime = gen.runtime
        vocab = int(json.loads((ckpt / "config.json").read_text())["vocab_size"])
        prompt = np.random.default_rng(0).integers(3, vocab, size=(1, args.prompt))
        greedy = Sampling(temperature=0)
        rows = []
        for r in range(args.rounds + 1):
            so = ort.SessionOptions()
            so.intra_op_num_threads = args.threads
            so.enable_profiling = True
            so.profile_file_prefix = str(Path(tmp) / f"round{r}")
            runtime.runner.session = ort.InferenceSession(str(runtime.step_path), so,
                                                          providers=["CPUExecutionProvider"])
            start = time.perf_counter()
            res = gen.generate(prompt, max_new_tokens=args.new, sampling=greedy)
            wall = (time.perf_counter() - start - res.prefill_seconds) / (args.new - 1) * 1e3
            times = step_times(Path(runtime.runner.session.end_profiling()))
            if r:
                rows.append((wall, statistics.median(t for t, _ in times), statistics.median(k for _, k in times)))
    wall, run, kernels = (statistics.median(c) for c in zip(*rows, strict=True))
    shape = "a tiny Llama (--quick)" if args.quick else "SmolLM2-135M's shape"
    kind = f"{args.quantize or 'fp32'} {'standard ONNX ops' if args.standard else '--contrib-ops'}"
    print(f"# decode step outside the kernels: {shape}, {kind}, prompt {args.prompt}, {args.new} new tokens, greedy, "
          f"{args.threads} threads; {machine_summary()}; medians of {args.rounds} generations")
    print("| per token | ms | share of wall |")
    print("|---|---|---|")
    for label, value in (("wall (the loop)", wall), ("onnxruntime run", run), ("kernels", kernels),
                         ("outside the kernels (wall − kernels)", wall - kernels),
                         ("inside run, outside kernels (run − kernels)", run - kernels),
                         ("Python and bindings (wall − run)", wall - run)):
        print(f"| {label} | {value:.3f} | {value / wall:.1%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
