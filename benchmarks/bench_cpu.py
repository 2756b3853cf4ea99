#!/usr/bin/env python3
"""CPU benchmark: pseudoformer's GPT-2 / BERT on ONNX Runtime against torch.onnx exports and eager PyTorch.

For each model (random HuggingFace weights, fixed seed) it builds, in one process on one machine:

  ours                      `pseudoformer.compile(models/<m>.alg, weights=<checkpoint>)` on ORT CPU
  torch-legacy[attn]        torch.onnx.export(dynamo=False) of the same HF model on ORT CPU
  torch-dynamo[attn]        torch.onnx.export(dynamo=True)
  ...+ortopt                onnxruntime.transformers.optimizer.optimize_model applied to an export
  eager                     PyTorch eager under torch.inference_mode()

and times them on batch 1 at each sequence length with interleaved repetitions (round-robin over the
variants, after warm-up), reporting medians. It also times compilation (ours: compile + save; torch:
export + save), counts the ONNX ops of every graph, checks every variant's logits against eager, and
checks the project's targets. `--profile` adds ORT's per-op-type time for ours and the best export.

    python benchmarks/bench_cpu.py                      # full run: gpt2 + bert, seq 128 and 512
    python benchmarks/bench_cpu.py --quick              # tiny configs, smoke test
    python benchmarks/bench_cpu.py --models gpt2 --seqs 128 --reps 20 --profile --json out.json
    python benchmarks/bench_cpu.py --compile-only --compile-reps 5 --exporters legacy   # compile time, by stage
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from common.cpu_compile_time import compile_child, compile_rounds
from common.cpu_measure import bench_model, warm_up_tools
from common.cpu_report import render, render_compile, to_json
from common.cpu_variants import SPECS, log
from common.harness import common_arguments, machine_facts


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    def csv(s: str) -> list[str]:
        return [p.strip() for p in s.split(",") if p.strip()]

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=csv, default=["gpt2", "bert"], help="comma-separated: gpt2,bert")
    ap.add_argument("--seqs", type=lambda s: [int(v) for v in csv(s)], default=None,
                    help="sequence lengths (default 128,512; --quick: 16,32)")
    ap.add_argument("--reps", type=int, default=None, help="timed repetitions per variant (default 15; --quick: 3)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed runs per variant first (default 3; --quick: 1)")
    common_arguments(ap)
    ap.add_argument("--opt-level", type=int, default=None,
                    help="passed to pseudoformer.compile(opt_level=...) if it takes one; default: its own")
    ap.add_argument("--exporters", type=csv, default=["legacy", "dynamo"],
                    help="torch.onnx.export paths to try: legacy (dynamo=False), dynamo")
    ap.add_argument("--attn", type=csv, default=["eager"],
                    help="HF attn_implementation(s) to export: eager, sdpa (default eager)")
    ap.add_argument("--opset", type=int, default=20, help="opset of the torch exports (default 20)")
    ap.add_argument("--no-ort-optimizer", dest="ort_optimizer", action="store_false",
                    help="skip onnxruntime.transformers.optimizer on the exports")
    ap.add_argument("--gap-ms", type=float, default=20.0, help="idle time before each timed call (default 20)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="tiny configs and few reps: a smoke run in seconds")
    ap.add_argument("--profile", action="store_true",
                    help="ORT profiling of ours and of the best export: time per op type, top 10")
    ap.add_argument("--profile-reps", type=int, default=None, help="profiled runs (default 5; --quick: 2)")
    ap.add_argument("--no-warmup-tools", dest="warm_tools", action="store_false",
                    help="do not warm the compilers up before timing them (default: on, except --quick)")
    ap.add_argument("--compile-only", action="store_true",
                    help="time only compilation: ours by stage against the exports, interleaved rounds")
    ap.add_argument("--compile-reps", type=int, default=5, help="rounds for --compile-only (default 5)")
    ap.add_argument("--compile-in-process", action="store_true",
                    help="--compile-only in this one process (default: a fresh process per measurement)")
    ap.add_argument("--compile-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--workdir", type=Path, default=None, help="keep checkpoints and .onnx files here")
    ap.add_argument("--json", type=Path, default=None, help="write the raw numbers here")
    ap.add_argument("--markdown", type=Path, default=None, help="also write the tables here")
    args = ap.parse_args(argv)
    args.seqs = args.seqs or ([16, 32] if args.quick else [128, 512])
    args.reps = args.reps if args.reps is not None else (3 if args.quick else 15)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    args.profile_reps = args.profile_reps if args.profile_reps is not None else (2 if args.quick else 5)
    if args.quick:
        args.warm_tools = False
        args.gap_ms = min(args.gap_ms, 2.0)
    for m in args.models:
        if m not in SPECS:
            ap.error(f"unknown model {m!r} (choose from {', '.join(SPECS)})")
    for ex in args.exporters:
        if ex not in ("legacy", "dynamo"):
            ap.error(f"unknown exporter {ex!r} (legacy, dynamo)")
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.compile_child is not None:
        print(json.dumps(compile_child(json.loads(args.compile_child))))
        return 0
    import torch

    torch.set_num_threads(args.threads)
    with contextlib.suppress(RuntimeError):  # only settable before torch's first parallel work
        torch.set_num_interop_threads(1)
    facts = machine_facts("torch", "transformers", "onnxruntime")
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if args.workdir is not None:
            work = args.workdir
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pf-bench-")))
        if args.warm_tools and not (args.compile_only and not args.compile_in_process):
            log("warming up the compilers (untimed)")
            warm_up_tools(work, args, args.exporters)
        if args.compile_only:
            compiled = [compile_rounds(SPECS[m], args, work) for m in args.models]
            text = render_compile(compiled, args, facts)
            print(text)
            if args.markdown is not None:
                args.markdown.write_text(text)
            if args.json is not None:
                args.json.write_text(json.dumps({"machine": facts, "compile": compiled}, indent=1, default=str))
            return 0
        results = [bench_model(SPECS[m], args, work) for m in args.models]
        wall = time.perf_counter() - t0
        text = render(results, args, facts)
        text += f"\n\nWall time of this run: {wall:.0f} s.\n"
        print(text)
        if args.markdown is not None:
            args.markdown.write_text(text)
        if args.json is not None:
            args.json.write_text(json.dumps(to_json(results, args, facts, wall), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
