"""bench_cpu.py's run times: one model's variants built, counted, checked against eager and timed.

For each model: ours compiled and each torch export (and `optimize_model` on it) made, their ONNX ops
counted, then at each sequence length every variant's logits compared with eager's and the variants
timed in interleaved rounds; `--profile` adds ORT's own time per op type for ours and the best export.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from common.cpu_variants import (
    SPECS,
    Spec,
    build_hf,
    compile_ours,
    eager_runner,
    load_hf,
    log,
    ort_optimize,
    ort_runner,
    ort_session,
    quiet,
    torch_export,
)
from common.harness import round_robin

ATTENTION_OPS = {"Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention"}


@dataclass
class ModelResult:
    name: str
    compile_s: dict[str, float] = field(default_factory=dict)
    opt_level: str = ""
    errors: dict[str, str] = field(default_factory=dict)
    fused: dict[str, dict[str, int]] = field(default_factory=dict)
    ortopt_type: dict[str, str] = field(default_factory=dict)  # the optimizer's model_type that worked
    ops: dict[str, dict[str, int]] = field(default_factory=dict)
    timings: dict[int, dict[str, list[float]]] = field(default_factory=dict)
    max_abs_diff: dict[int, dict[str, float]] = field(default_factory=dict)
    profile: dict[int, dict[str, Any]] = field(default_factory=dict)
    structure: dict[str, Any] = field(default_factory=dict)


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:300] if text else ''}"


def op_histogram(path: Path) -> Counter[str]:
    """Op types in a graph, counting nodes inside subgraphs and local functions too."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    hist: Counter[str] = Counter()

    def visit(nodes: Sequence[Any]) -> None:
        for n in nodes:
            hist[n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"] += 1
            for a in n.attribute:
                if a.g is not None and len(a.g.node):
                    visit(a.g.node)
                for g in a.graphs:
                    visit(g.node)

    visit(model.graph.node)
    for f in model.functions:
        visit(f.node)
    return hist


def bare(op: str) -> str:
    return op.rsplit(".", 1)[-1]


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def best_torch(res: ModelResult, seq: int) -> str | None:
    cands = {n: median(t) for n, t in res.timings.get(seq, {}).items() if n.startswith("torch-")
             and res.max_abs_diff[seq].get(n, np.inf) <= 1e-2}
    return min(cands, key=lambda n: cands[n]) if cands else None


def measure(runners: dict[str, Callable[[np.ndarray], np.ndarray]], x: np.ndarray, warmup: int, reps: int,
            gap_s: float) -> dict[str, list[float]]:
    """Milliseconds per call, interleaved in rotating order with an idle gap before each (round_robin)."""
    seconds = round_robin({n: partial(run, x) for n, run in runners.items()}, reps=reps, warmup=warmup,
                          gap_s=gap_s)
    return {n: [s * 1e3 for s in ts] for n, ts in seconds.items()}


def profile_ops(path: Path, x: np.ndarray, threads: int, runs: int, prefix: Path) -> dict[str, Any]:
    """ORT's own per-node timings, summed per op type per run (the first, warm-up run left out)."""
    sess = ort_session(path, threads, prefix)
    run = ort_runner(sess)
    for _ in range(runs + 1):
        run(x)
    return ops_of_trace(Path(sess.end_profiling()))


def ops_of_trace(trace_path: Path) -> dict[str, Any]:
    """An ORT profile's per-node timings, summed per op type per run (the first, warm-up run left out)."""
    events = json.loads(trace_path.read_text())
    model_runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])
    cutoff = model_runs[0]["ts"] + model_runs[0]["dur"] if model_runs else 0
    per_op: Counter[str] = Counter()
    nodes: Counter[str] = Counter()
    for e in events:
        if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time") and e["ts"] >= cutoff:
            op = e.get("args", {}).get("op_name", "?")
            per_op[op] += e["dur"]
            nodes[op] += 1
    n = max(1, len(model_runs) - 1)
    total = sum(per_op.values()) / n / 1e3
    run_ms = statistics.median(e["dur"] for e in model_runs[1:]) / 1e3 if len(model_runs) > 1 else None
    top = [{"op": op, "ms": us / n / 1e3, "share": us / n / 1e3 / total if total else 0.0,
            "nodes": nodes[op] // n} for op, us in per_op.most_common()]
    return {"trace": str(trace_path), "runs": n, "kernel_ms": total, "run_ms": run_ms, "ops": top}


def warm_up_tools(work: Path, args: argparse.Namespace, exporters: list[str]) -> None:
    """One untimed tiny compile and export of each kind, so imports and first-call setup are not timed."""
    spec = SPECS["gpt2"]
    d = work / "warmup"
    d.mkdir(exist_ok=True)
    hf = build_hf(spec, True, args.seed)
    with quiet():
        hf.save_pretrained(d / "ckpt")
    compile_ours(spec, d / "ckpt", d / "ours.onnx", args.opt_level)
    import torch

    trace = torch.zeros((2, 8), dtype=torch.int64)
    for ex in exporters:
        with contextlib.suppress(Exception):  # a failing exporter fails again, timed, where it is reported
            torch_export(spec, hf, ex, d / f"{ex}.onnx", args.opset, trace)


def bench_model(spec: Spec, args: argparse.Namespace, work: Path) -> ModelResult:
    import torch

    res = ModelResult(spec.name)
    d = work / spec.name
    d.mkdir(exist_ok=True)
    quick = args.quick

    log(f"{spec.name}: building the HF model and its checkpoint")
    hf = build_hf(spec, quick, args.seed)
    ckpt = d / "hf"
    with quiet():
        hf.save_pretrained(ckpt)

    log(f"{spec.name}: pseudoformer compile")
    ours = d / "ours.onnx"
    res.compile_s["ours"], res.opt_level = compile_ours(spec, ckpt, ours, args.opt_level)
    paths: dict[str, Path] = {"ours": ours}

    # Batch 2 so the exporters cannot specialise the batch axis to 1; 16 tokens fits every config.
    trace = torch.randint(0, spec.vocab(quick), (2, 16), generator=torch.Generator().manual_seed(1))
    for attn in args.attn:
        model = hf if attn == hf.config._attn_implementation else load_hf(spec, ckpt, attn)
        for ex in args.exporters:
            name = f"torch-{ex}[{attn}]"
            out = d / f"{ex}-{attn}.onnx"
            log(f"{spec.name}: {name} export")
            try:
                res.compile_s[name] = torch_export(spec, model, ex, out, args.opset, trace)
                paths[name] = out
            except Exception as e:  # every exporter failure is a result to report, not a crash
                res.errors[name] = first_line(e)
                log(f"{spec.name}: {name} failed: {res.errors[name]}")
                continue
            if args.ort_optimizer:
                opt_name = f"{name}+ortopt"
                log(f"{spec.name}: {opt_name}")
                try:
                    res.compile_s[opt_name], res.fused[opt_name], res.ortopt_type[opt_name] = ort_optimize(
                        spec, out, d / f"{ex}-{attn}-ortopt.onnx", quick)
                    paths[opt_name] = d / f"{ex}-{attn}-ortopt.onnx"
                except Exception as e:
                    res.errors[opt_name] = first_line(e)
                    log(f"{spec.name}: {opt_name} failed: {res.errors[opt_name]}")
        if model is not hf:
            del model

    for name, p in paths.items():
        hist = op_histogram(p)
        res.ops[name] = dict(hist.most_common())
    ours_ops = Counter(res.ops["ours"])
    res.structure = {
        "layers": spec.layers(quick),
        "attention_ops": sum(v for k, v in ours_ops.items() if bare(k) in ATTENTION_OPS),
        "softmax_outside_attention": sum(v for k, v in ours_ops.items() if bare(k) == "Softmax"),
        "layer_norm_ops": ours_ops.get("LayerNormalization", 0),
        "layer_norms_in_model": spec.layer_norms(quick),
    }

    log(f"{spec.name}: creating {len(paths)} ORT sessions")
    sessions = {name: ort_session(p, args.threads) for name, p in paths.items()}
    runners = {name: ort_runner(s) for name, s in sessions.items()}
    runners["eager"] = eager_runner(hf)

    rng = np.random.default_rng(args.seed)
    for seq in args.seqs:
        x = rng.integers(0, spec.vocab(quick), size=(1, seq), dtype=np.int64)
        ref = runners["eager"](x)
        diffs = {}
        for name, run in runners.items():
            try:
                diffs[name] = float(np.abs(run(x) - ref).max())
            except Exception as e:  # e.g. an export that baked in the traced length
                res.errors[f"{name}@{seq}"] = first_line(e)
        res.max_abs_diff[seq] = diffs
        live = {n: r for n, r in runners.items() if n in diffs}
        log(f"{spec.name} seq {seq}: {args.warmup} warm-up + {args.reps} interleaved reps of {len(live)} variants")
        res.timings[seq] = measure(live, x, args.warmup, args.reps, args.gap_ms / 1e3)
        if args.profile:
            best = best_torch(res, seq)
            for name in ["ours"] + ([best] if best else []):
                log(f"{spec.name} seq {seq}: profiling {name}")
                prefix = d / f"profile-{name.replace('[', '-').replace(']', '').replace('+', '-')}-{seq}"
                res.profile.setdefault(seq, {})[name] = profile_ops(paths[name], x, args.threads,
                                                                    args.profile_reps, prefix)
    del sessions, runners, hf
    gc.collect()
    return res
