#!/usr/bin/env python3
"""Does `compile --functions` cost anything on ONNX Runtime? GPT-2 small, flat against local functions.

onnxruntime inlines a model's local functions when it creates a session, before it optimises the
graph, so the graph it runs should be the flat one: this measures both the session creation (where
the inlining happens) and the run, and checks the rest.

  - both models give the same bits on the same input (the script exits 1 if not);
  - the ops of the graphs ORT optimised (saved with `optimized_model_filepath`), and how they differ;
  - session creation, from the saved file, each variant in turn (round_robin);
  - a run at each sequence length, batch 1, interleaved with an idle gap (round_robin).

Figures are medians over the interleaved rounds.

    python benchmarks/bench_functions.py [--seqs 128 512] [--reps 20] [--sessions 7] [--threads N]
                                         [--opt-level 2] [--dtype float32] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from common.harness import common_arguments, round_robin

from pseudoformer.backends.onnx import OnnxRunner, save_model
from pseudoformer.deploy import lower
from pseudoformer.model import load

ROOT = Path(__file__).resolve().parents[1]
QUICK = ["L=2", "H=2", "d_e=16", "d_mlp=32", "d_attn=8", "d_mid=8", "N_V=101", "ell_max=64"]
VARIANTS = ("flat", "functions")


def optimized_ops(path: Path, out: Path, threads: int | None) -> Counter:
    """The op types of the graph ORT runs, after inlining and its optimisations."""
    options = ort.SessionOptions()
    options.log_severity_level = 3  # not the warning that an optimised model is for this machine only
    options.optimized_model_filepath = str(out)
    if threads:
        options.intra_op_num_threads = threads
    ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    model = onnx.load(str(out), load_external_data=False)
    return Counter(n.op_type for n in model.graph.node)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--reps", type=int, default=20, help="timed runs per variant and length")
    ap.add_argument("--sessions", type=int, default=7, help="timed session creations per variant")
    common_arguments(ap, threads=None)
    ap.add_argument("--opt-level", type=int, default=2)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--gap", type=float, default=0.05, help="idle seconds before each timed run")
    ap.add_argument("--quick", action="store_true", help="a tiny GPT-2, short sequences, few reps: a smoke run")
    args = ap.parse_args(argv)
    defines = QUICK if args.quick else []
    if args.quick:
        args.seqs, args.reps, args.sessions = [s for s in args.seqs if s <= 64] or [16], min(args.reps, 3), 2

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        paths, skeletons = {}, {}
        model = load(ROOT / "models/gpt2.alg", defines=defines)
        for v in VARIANTS:
            t = time.perf_counter()
            lowered = lower(model, dtype=args.dtype, opt_level=args.opt_level, whole=False, functions=v == "functions")
            skeletons[v] = (lowered.skeleton, time.perf_counter() - t)
            paths[v] = save_model(lowered, work / f"{v}.onnx")
        print(f"GPT-2{' (tiny)' if args.quick else ' small'}, -O{args.opt_level}, {args.dtype}, "
              f"onnxruntime {ort.__version__}, threads {args.threads or 'default'}\n")
        print("| model | graph nodes | functions | nodes in functions | file without weights | lowering (s) |")
        print("|---|---|---|---|---|---|")
        for v in VARIANTS:
            m, seconds = skeletons[v]
            print(f"| {v} | {len(m.graph.node)} | {len(m.functions)} | {sum(len(f.node) for f in m.functions)} "
                  f"| {m.ByteSize() / 1024:.0f} KB | {seconds:.1f} |")

        ops = {v: optimized_ops(paths[v], work / f"{v}.optimized.onnx", args.threads) for v in VARIANTS}
        print(f"\nORT's optimised graphs: flat {sum(ops['flat'].values())} nodes, functions "
              f"{sum(ops['functions'].values())}")
        if ops["flat"] != ops["functions"]:
            print(f"only in flat: {_ops(ops['flat'] - ops['functions'])}; "
                  f"only in functions: {_ops(ops['functions'] - ops['flat'])}")

        made = round_robin({v: (lambda p=paths[v]: OnnxRunner(p, threads=args.threads)) for v in VARIANTS},
                           reps=args.sessions, warmup=1)
        runners = {v: OnnxRunner(paths[v], threads=args.threads) for v in VARIANTS}
        rng = np.random.default_rng(0)
        rows = [("session creation", {v: statistics.median(made[v]) * 1e3 for v in VARIANTS})]
        identical = True
        for seq in args.seqs:
            x = {"x": rng.integers(0, 101 if args.quick else 50257, (1, seq), dtype=np.int64)}
            out = {v: runners[v].run(x)["Y"] for v in VARIANTS}
            identical &= bool(np.array_equal(out["flat"], out["functions"]))
            times = round_robin({v: partial(runners[v].run, x) for v in VARIANTS}, reps=args.reps, warmup=2,
                                gap_s=args.gap)
            rows.append((f"run, seq {seq}", {v: statistics.median(times[v]) * 1e3 for v in VARIANTS}))

    print(f"\nMedians in ms ({args.sessions} session creations, {args.reps} runs per length, interleaved):\n")
    print("| | flat | functions | functions / flat |")
    print("|---|---|---|---|")
    for label, ms in rows:
        print(f"| {label} | {ms['flat']:.1f} | {ms['functions']:.1f} | {ms['functions'] / ms['flat']:.3f} |")
    print(f"\noutputs bit for bit identical: {'yes' if identical else 'NO'}")
    return 0 if identical else 1


def _ops(c: Counter) -> str:
    return ", ".join(f"{n} {op}" for op, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))) or "none"


if __name__ == "__main__":
    sys.exit(main())
