"""Where one AdamW step's time goes, ours on onnxruntime against torch eager, profiled in one process with
the steps interleaved (the load, if any, falls on both alike): a table of components, ms per step.

    ours          onnxruntime's profiler on the gradient session (`enable_profiling`), the update session
                  timed as a whole (it is nothing but AdamW's elementwise nodes)
    torch eager   torch.profiler, self CPU time per op, the optimizer's (everything under
                  `Optimizer.step`) apart

Components: matrix products (MatMul, FusedMatMul, Gemm; aten::mm, addmm, bmm), the fused attention kernels,
other ops over a vocabulary-sized tensor (the loss, the unembedding's and embedding's gradients: any output
or input with the vocabulary in its shape), the optimizer, and everything else (norms, GELU, residuals, the
transposes and zeros the backward pass writes). "step (wall)" is the median step time; the kernel sums
miss what runs between kernels (onnxruntime's executor, Python, autograd's bookkeeping).

    python benchmarks/profile_train_vs_torch.py [--batch 4] [--steps 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import training  # noqa: E402
from common.harness import training_arguments  # noqa: E402

PRODUCTS = {"MatMul", "FusedMatMul", "Gemm", "aten::mm", "aten::addmm", "aten::bmm"}
ATTENTION = ("Attention", "aten::_scaled_dot_product", "aten::_flash_attention")
COMPONENTS = ["matrix products", "attention kernels", "vocabulary-sized, other", "optimizer", "everything else"]


def component(op: str, vocab_sized: bool) -> str:
    if op in PRODUCTS:
        return "matrix products"
    if op.startswith(ATTENTION):
        return "attention kernels"
    return "vocabulary-sized, other" if vocab_sized else "everything else"


def ours_components(trace: list[dict], vocab: int, skip_runs: int) -> dict[str, float]:
    """Kernel µs per component over the gradient session's runs after the first `skip_runs`, summed."""
    runs = [e for e in trace if e.get("name") == "model_run"]
    start = runs[skip_runs]["ts"] if len(runs) > skip_runs else 0
    out: dict[str, float] = defaultdict(float)
    for e in trace:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time") or e["ts"] < start:
            continue
        args = e.get("args", {})
        shapes = json.dumps([args.get("output_type_shape", ""), args.get("input_type_shape", "")])
        out[component(args.get("op_name", "?"), str(vocab) in shapes)] += e["dur"]
    return out


def torch_components(prof, vocab: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Self CPU µs per component over every profiled step, summed."""
    out: dict[str, float] = defaultdict(float)
    for e in prof.events():
        up, in_optimizer = e, False
        while up is not None:
            if up.name.startswith("Optimizer.step"):
                in_optimizer = True
                break
            up = up.cpu_parent
        vocab_sized = any(vocab in s for s in (e.input_shapes or []) if isinstance(s, list))
        key = "optimizer" if in_optimizer else component(e.name, vocab_sized)
        out[key] += e.self_cpu_time_total
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="gpt2")
    training_arguments(ap, steps_help="profiled steps of each, after one warm-up step")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--workdir", help="where the HF checkpoint is written (default: the system's temp dir)")
    args = ap.parse_args(argv)
    args.ort, args.ort_b = [], []  # training.ours reads them
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(args.threads)
    hf = training.hf_model(args.workload, args)
    vocab = hf.config.vocab_size
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        hf.save_pretrained(tmp)
        (rt,), _ = training.ours(args.workload, Path(tmp), args, profile=True)
    torch_step = training.torch_step(hf, args.workload, False, args)
    xs = training.batches(vocab, args, args.steps + 1)
    rt.step({"x": xs[0]}, 1e-4)
    torch_step(xs[0])
    ours_ms, update_ms, torch_ms = [], [], []
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for i, x in enumerate(xs[1:]):
            for side in (("ours", "torch") if i % 2 == 0 else ("torch", "ours")):
                t = time.perf_counter()
                if side == "torch":
                    torch_step(x)
                    torch_ms.append((time.perf_counter() - t) * 1e3)
                    continue
                rt.binding.bind_cpu_input("x", x)  # runtimes.OrtSplitStep.step, its halves timed apart
                rt.session.run_with_iobinding(rt.binding)
                u = time.perf_counter()
                rt.update.run_with_iobinding(rt.update_binding)
                ours_ms.append((time.perf_counter() - t) * 1e3)
                update_ms.append((time.perf_counter() - u) * 1e3)
    profile = Path(rt.session.end_profiling())  # in a directory of its own (backends/onnx/sessions.py)
    trace = json.loads(profile.read_text())
    shutil.rmtree(profile.parent, ignore_errors=True)
    ours = {k: v / 1e3 / args.steps for k, v in ours_components(trace, vocab, skip_runs=1).items()}
    ours["optimizer"] = statistics.mean(update_ms)
    theirs = {k: v / 1e3 / args.steps for k, v in torch_components(prof, vocab).items()}
    print(f"{args.workload}, batch {args.batch}, seq {args.seq}, {args.threads} threads, {args.steps} steps each\n")
    print("| component | ours ms | torch eager ms | ours / torch |\n|---|---|---|---|")
    for k in COMPONENTS:
        a, b = ours.get(k, 0.0), theirs.get(k, 0.0)
        print(f"| {k} | {a:.1f} | {b:.1f} | {a / b:.2f}× |" if b else f"| {k} | {a:.1f} | {b:.1f} | – |")
    a, b = sum(ours.values()), sum(theirs.values())
    print(f"| sum of kernels | {a:.1f} | {b:.1f} | {a / b:.2f}× |")
    a, b = statistics.median(ours_ms), statistics.median(torch_ms)
    print(f"| step (wall, median) | {a:.1f} | {b:.1f} | {a / b:.2f}× |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
