"""Training step time: ours on onnxruntime against torch eager (and torch.compile with --compile), interleaved
in one process with the same threads, on HF models built from configs and the same weights and batches;
with --torch-backend and --torch-backend-compile also ours on the torch backend (`train --backend torch`, and
with `--torch-compile`).

Workloads:
  gpt2       GPT-2 shaped, L=4, d_e=512, 8 heads, the GPT-2 vocabulary; every parameter trained; AdamW
  gpt2small  GPT-2 small itself (L=12, d_e=768, 12 heads), the same way
  smollm2    LoRA on SmolLM2-135M's shape (30 layers, d_e=576, 9/3 heads, vocabulary 49152, tied):
             tests/training/llama_lora_loss.alg, rank 8 per query and value head (A random, B = 0), only
             the adapters trained, every other weight frozen on both sides; torch: HF's Llama with the same
             per-head updates on q_proj and v_proj (tests/training/lora_cases.py); AdamW

Reported per workload and variant: the median time per step, tokens/s, the achieved GFLOP/s (the step's
matrix-product FLOPs: 2·N·T forward, 2·N·T for the input gradients, 2·N_trained·T for the weight gradients,
and attention's) against onnxruntime's MatMul ceiling measured here, and the peak RSS (VmHWM) of a child
process that builds only that variant and runs a few steps. --plain adds our step compiled without the
rewrite rules of the training step (passes/rules/batched_weight_gradient.py: each weight's gradient over the
batch left as B products summed): a before/after in one run; --without PASS adds our step compiled without that
one pass of the "training-step" pipeline (passes/manager.py), split and in place like ours: a before/after of
the pass in one run. Ours runs the step as a gradient graph and an
update graph writing θ, m, v in place (passes/split_step.py); --one-graph adds the same step
as one graph, double-buffered (θ, m, v read from one set and written to another): a before/after in one run.
--torch-backend adds ours on the torch backend (training/torch_loop.TorchRuntime: the same loss algorithm and
weights lowered to a torch module, torch's autograd, torch.optim's fused AdamW), eager; --torch-backend-compile
the same under torch.compile (training/torch_compile.py); --torch-backend-compile-plain that without our
rewrites of inductor's post-grad graph (backends/torch/inductor_rules/): a before/after in one run. A compiled
variant's first step (its compile) is timed apart, as `build_s`, and is not among the timed steps. --quick shrinks everything, for the smoke test.

    python benchmarks/bench_train.py [--workloads gpt2,smollm2] [--steps 10] [--threads 2] [--compile] [--plain]
        [--without PASS] [--one-graph] [--whole-update] [--torch-backend] [--torch-backend-compile]
        [--torch-backend-compile-plain] [--no-eager] [--no-rss] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from common.harness import round_robin, training_arguments
from common.training import QUICK, SHAPES, batches, gpt2_like, hf_model, ours, ours_torch, torch_step

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = {"ours (onnxruntime)": "ours", "ours, session B": "session-b", "ours, plain lowering": "plain",
            "ours, one graph": "one-graph", "ours, whole-tensor update": "whole-update",
            "ours, torch backend": "torch-backend", "ours, torch backend + torch.compile": "torch-backend-compile",
            "ours, torch.compile without our inductor rules": "torch-backend-compile-plain",
            "torch eager": "eager", "torch.compile": "compile"}
# The variants whose first step compiles (torch.compile): its time is their build time
COMPILED = ("torch-backend-compile", "torch-backend-compile-plain", "compile")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="gpt2,smollm2")
    ap.add_argument("--warmup", type=int, default=2)
    training_arguments(ap, batch=8, steps=10, steps_help="timed steps per variant (interleaved)")
    ap.add_argument("--compile", action="store_true", help="also torch.compile (slow to compile on a loaded CPU)")
    ap.add_argument("--plain", action="store_true", help="also ours without the training step's rewrite rules (before/after)")
    ap.add_argument("--without", metavar="PASS",
                    help="also ours with the training-step pipeline's pass PASS left out (before/after of that pass)")
    ap.add_argument("--one-graph", action="store_true",
                    help="also ours as one graph, double-buffered (before the in-place update)")
    ap.add_argument("--whole-update", action="store_true",
                    help="also ours with the update over whole tensors, not cache-sized pieces (before/after)")
    ap.add_argument("--torch-backend", action="store_true",
                    help="also ours on the torch backend, eager (train --backend torch)")
    ap.add_argument("--torch-backend-compile", action="store_true",
                    help="also ours on the torch backend under torch.compile (train --backend torch --torch-compile; "
                    "slow to compile on a loaded CPU)")
    ap.add_argument("--torch-backend-compile-plain", action="store_true",
                    help="also that without our rewrites of inductor's graph (backends/torch/inductor_rules/): "
                    "before/after")
    ap.add_argument("--ort", action="append", default=[], metavar="KEY=VALUE",
                    help="an onnxruntime.SessionOptions attribute for our sessions (enable_cpu_mem_arena=0)")
    ap.add_argument("--ort-b", action="append", default=[], metavar="KEY=VALUE",
                    help="adds the variant 'ours, session B': the same step with these SessionOptions instead")
    ap.add_argument("--no-ours", action="store_true", help="torch only (eager against torch.compile)")
    ap.add_argument("--no-eager", action="store_true", help="without torch eager (ours against ours: --plain)")
    ap.add_argument("--no-rss", action="store_true", help="skip the peak-RSS children")
    ap.add_argument("--quick", action="store_true", help="tiny shapes, 2 steps: the smoke test")
    ap.add_argument("--json")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # "WORKLOAD:VARIANT": peak RSS of one variant alone
    ap.add_argument("--workdir", help="where the HF checkpoints are written (default: the system's temp dir)")
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def flops(hf, workload: str, tokens: int, seq: int) -> float:  # type: ignore[no-untyped-def]
    """Matrix-product FLOPs of one step (see the module's docstring)."""
    matrices = [(n, p) for n, p in hf.named_parameters() if p.ndim == 2 and "wpe" not in n]
    n_all = sum(p.numel() for _, p in matrices)
    n_train = n_all if gpt2_like(workload) else 0  # LoRA: the adapters' products are negligible
    cfg = hf.config
    layers = getattr(cfg, "n_layer", None) or cfg.num_hidden_layers
    width = getattr(cfg, "n_embd", None) or cfg.num_attention_heads * cfg.head_dim
    attention = 2 * 2 * layers * seq * width * tokens  # QKᵀ and AV, forward
    return 2 * n_all * tokens + 2 * n_all * tokens + 2 * n_train * tokens + 3 * attention


def matmul_ceiling(threads: int, m: int = 1024, k: int = 512, n: int = 2048) -> float:
    """GFLOP/s of one large float32 MatMul on onnxruntime with these threads."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "mm",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [k, n])],
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT, [m, n])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    s = ort.InferenceSession(model.SerializeToString(), o, providers=["CPUExecutionProvider"])
    feed = {"a": np.random.rand(m, k).astype(np.float32), "b": np.random.rand(k, n).astype(np.float32)}
    times = round_robin({"MatMul": lambda: s.run(None, feed)}, reps=10, warmup=3)["MatMul"]
    del onnx
    return 2 * m * k * n / statistics.median(times) / 1e9


def peak_rss_mib() -> float:
    """This process's peak resident set (VmHWM). ru_maxrss would not do: Linux carries it over an exec from
    the parent, so a child of a big benchmark reports the parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(args: argparse.Namespace) -> int:
    """Build one variant alone and run a few steps; print its peak RSS in MiB."""
    import torch

    torch.set_num_threads(args.threads)
    workload, variant = args.child.split(":")
    if variant in ("ours", "plain", "session-b", "one-graph", "whole-update") or variant.startswith("without="):
        # only this variant's runtime: session B's options in place of ours, or none of them
        args.ort, args.ort_b = (args.ort_b, []) if variant == "session-b" else (args.ort, [])
        from pseudoformer.passes import manager

        if variant == "plain":  # only the step without the rules, so that the peak is its own
            manager.PIPELINES["training-step"] = manager.LEVELS[1]
        elif variant.startswith("without="):  # only the step without that pass
            left_out = variant.split("=", 1)[1]
            manager.PIPELINES["training-step"] = [p for p in manager.PIPELINES["training-step"] if p != left_out]
        (rt,), _ = ours(workload, Path(args.dir), args, only_one_graph=variant == "one-graph",
                        update_chunk=0 if variant == "whole-update" else None)
        step = lambda x: rt.step({"x": x}, 1e-4)  # noqa: E731
    elif variant in ("torch-backend", "torch-backend-compile", "torch-backend-compile-plain"):
        step = ours_torch(workload, Path(args.dir), args, compiled=variant != "torch-backend",
                          rules=variant != "torch-backend-compile-plain")
    else:
        step = torch_step(hf_model(workload, args), workload, variant == "compile", args)
    for x in batches(VOCAB[workload](args), args, 3):
        step(x)
    print(json.dumps({"peak_rss_mib": peak_rss_mib()}))
    return 0


VOCAB = {"gpt2": lambda a: (QUICK if a.quick else SHAPES)["gpt2"]["vocab_size"],
         "gpt2small": lambda a: (QUICK if a.quick else SHAPES)["gpt2small"]["vocab_size"],
         "smollm2": lambda a: QUICK["smollm2"]["vocab_size"] if a.quick else 49152}


def child_rss(workload: str, kind: str, directory: str, args: argparse.Namespace) -> float | None:
    rss = subprocess.run([sys.executable, __file__, "--child", f"{workload}:{kind}", "--dir", directory,
                          "--threads", str(args.threads), "--seq", str(args.seq), "--batch", str(args.batch),
                          *(["--quick"] if args.quick else []), *(f"--ort={o}" for o in args.ort),
                          *(f"--ort-b={o}" for o in args.ort_b),
                          *(["--layers", str(args.layers)] if args.layers else [])],
                         capture_output=True, text=True, timeout=3600)
    if rss.returncode != 0:
        print(f"peak RSS of {workload}:{kind}: the child failed: {rss.stderr[-800:]}", file=sys.stderr)
        return None
    return json.loads(rss.stdout.strip().splitlines()[-1])["peak_rss_mib"]


def run_workload(workload: str, args: argparse.Namespace, ceiling: float) -> list[dict]:
    hf = hf_model(workload, args)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        hf.save_pretrained(tmp)
        t0 = time.perf_counter()
        runtimes, nodes = ([], None) if args.no_ours else ours(workload, Path(tmp), args, plain=args.plain,
                                                                    one_graph=args.one_graph,
                                                                    whole_update=args.whole_update,
                                                                    without=args.without)
        build_s = time.perf_counter() - t0
        variants = {} if args.no_ours else {"ours (onnxruntime)": lambda x: runtimes[0].step({"x": x}, 1e-4)}
        if args.ort_b:
            variants["ours, session B"] = lambda x: runtimes[1].step({"x": x}, 1e-4)
        if args.plain:
            variants["ours, plain lowering"] = lambda x: runtimes[1 + bool(args.ort_b)].step({"x": x}, 1e-4)
        if args.without:
            at = 1 + bool(args.ort_b) + args.plain
            variants[f"ours, without {args.without}"] = lambda x: runtimes[at].step({"x": x}, 1e-4)
        if args.one_graph:
            variants["ours, one graph"] = lambda x: runtimes[-1 - args.whole_update].step({"x": x}, 1e-4)
        if args.whole_update:
            variants["ours, whole-tensor update"] = lambda x: runtimes[-1].step({"x": x}, 1e-4)
        if args.torch_backend:
            variants["ours, torch backend"] = ours_torch(workload, Path(tmp), args, compiled=False)
        if args.torch_backend_compile:
            variants["ours, torch backend + torch.compile"] = ours_torch(workload, Path(tmp), args, compiled=True)
        if args.torch_backend_compile_plain:
            variants["ours, torch.compile without our inductor rules"] = ours_torch(workload, Path(tmp), args,
                                                                                    compiled=True, rules=False)
        if not args.no_eager:
            variants["torch eager"] = torch_step(hf_model(workload, args), workload, False, args)
        if args.compile:
            variants["torch.compile"] = torch_step(hf_model(workload, args), workload, True, args)
        xs = batches(hf.config.vocab_size, args, args.warmup + args.steps)
        first, first_s = {}, {}
        for k, fn in variants.items():  # same weights, same batch: the same loss
            t = time.perf_counter()
            first[k] = fn(xs[0])
            first_s[k] = time.perf_counter() - t  # a compiled variant's: its compile
        for x in xs[1:args.warmup]:
            for fn in variants.values():
                fn(x)
        times: dict[str, list[float]] = {k: [] for k in variants}
        for i, x in enumerate(xs[args.warmup:]):  # interleaved: each variant in turn on the same batch,
            names = list(variants)  # in an order that rotates every step
            for k in names[i % len(names):] + names[:i % len(names)]:
                t = time.perf_counter()
                variants[k](x)
                times[k].append(time.perf_counter() - t)
        rows = []
        work = flops(hf, workload, args.batch * args.seq, args.seq)
        for k, ts in times.items():
            med = statistics.median(ts)
            kind = VARIANTS[k] if k in VARIANTS else f"without={args.without}"
            peak = None if args.no_rss else child_rss(workload, kind, tmp, args)
            rows.append({"workload": workload, "variant": k, "ms_per_step": med * 1e3, "min_ms": min(ts) * 1e3,
                         "tokens_per_s": args.batch * args.seq / med, "gflops": work / med / 1e9,
                         "of_ceiling": work / med / 1e9 / ceiling, "peak_rss_mib": peak, "first_loss": first[k],
                         "steps_ms": [t * 1e3 for t in ts],
                         "build_s": build_s if kind == "ours" else first_s[k] if kind in COMPILED else None,
                         "step_nodes": nodes if kind == "ours" else None})
    return rows


def paired(r: dict, e: dict) -> float:
    """The median over the interleaved rounds of r's step time over e's in the same round."""
    return statistics.median(a / b for a, b in zip(r["steps_ms"], e["steps_ms"], strict=True))


def table(rows: list[dict], ceiling: float, args: argparse.Namespace) -> str:
    out = [f"ORT MatMul ceiling: {ceiling:.1f} GFLOP/s ({args.threads} threads); seq {args.seq}, batch {args.batch}",
           "", "| workload | variant | ms/step (median) | min | tokens/s | GFLOP/s | of ceiling | peak RSS MiB |"
           " first loss |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rss = f"{r['peak_rss_mib']:.0f}" if r["peak_rss_mib"] is not None else "–"
        out.append(f"| {r['workload']} | {r['variant']} | {r['ms_per_step']:.1f} | {r['min_ms']:.1f} | "
                   f"{r['tokens_per_s']:.0f} | "
                   f"{r['gflops']:.1f} | {r['of_ceiling']:.0%} | {rss} | {r['first_loss']:.4f} |")
    for w in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == w and r["variant"].startswith("ours")]
        e = next((r for r in rows if r["workload"] == w and r["variant"] == "torch eager"), None)
        if not mine or e is None:
            continue
        times = ", ".join(f"{r['variant']} {r['ms_per_step'] / e['ms_per_step']:.2f}× (paired "
                          f"{paired(r, e):.2f}×)" for r in mine)
        mems = ", ".join(f"{r['variant']} {r['peak_rss_mib'] / e['peak_rss_mib']:.2f}×" for r in mine
                         if r["peak_rss_mib"] and e["peak_rss_mib"]) or "–"
        out.append(f"\nTargets, {w}: per step, of torch eager's (target ≤ 0.8×): {times}; peak memory, of torch "
                   f"eager's (target ≤ 1×): {mems}")
        out.append("(paired: the median over the rounds of each round's ratio, the variants run one after another "
                   "on one batch, so that the machine's drift over the run cancels)")
    builds = [f"{r['workload']}, {r['variant']}: {r['build_s']:.1f} s" for r in rows
              if VARIANTS.get(r["variant"]) in COMPILED and r["build_s"] is not None]
    if builds:
        out.append(f"\nFirst step (its compile): {'; '.join(builds)}")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.seq, args.batch = 2, 1, 16, 2
    if args.child:
        return child(args)
    import torch

    torch.set_num_threads(args.threads)
    ceiling = matmul_ceiling(args.threads)
    rows = [r for w in args.workloads.split(",") for r in run_workload(w, args, ceiling)]
    print(table(rows, ceiling, args))
    if args.json:
        Path(args.json).write_text(json.dumps({"ceiling_gflops": ceiling, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
