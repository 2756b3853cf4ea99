"""Where a training step of ours spends its time and memory on onnxruntime: session profiling
(`SessionOptions.enable_profiling`) summed per op type, the largest tensors the step writes (from the
profile's `output_size` of each node), and the peak RSS under the session options given. `--live` adds
which tensors are live together at the gradient session's static peak: the nodes in the order onnxruntime ran
them (the profile's), each output held from its node to its last reader (graph outputs, bound by the runtime,
and any buffer reuse onnxruntime's planner makes in place are left out, so it is an upper bound on the
intermediates).

    python benchmarks/profile_train.py [--workload gpt2] [--batch 8] [--seq 128] [--layers 4] [--steps 3]
        [--live] [--ort KEY=VALUE]

The split step's two halves are also timed apart (the gradient graph, the update graph). Against torch
eager, component by component in one process: profile_train_vs_torch.py.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
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


def summarize(trace: list[dict], skip_runs: int = 1) -> tuple[dict[str, float], list[tuple[int, str, str, str]]]:
    """Per-op-type kernel microseconds over the runs after the first `skip_runs`, and the largest outputs."""
    runs = [e for e in trace if e.get("name") == "model_run"]
    start = runs[skip_runs]["ts"] if len(runs) > skip_runs else 0
    per_op: dict[str, float] = defaultdict(float)
    sizes: dict[str, tuple[int, str, str, str]] = {}
    for e in trace:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        args = e.get("args", {})
        if e["ts"] >= start:
            per_op[args.get("op_name", "?")] += e["dur"]
        size = int(args.get("output_size", 0))
        node = e["name"][: -len("_kernel_time")]
        shapes = json.dumps(args.get("output_type_shape", ""))[:120]
        sizes[node] = (size, args.get("op_name", "?"), node, shapes)
    n = max(len(runs) - skip_runs, 1)
    return {k: v / n for k, v in per_op.items()}, sorted(sizes.values(), reverse=True)


def live_at_peak(trace: list[dict], model_path: Path) -> tuple[int, str, list[tuple[int, str, str]]]:
    """The largest sum of intermediates live at once in the first run's order: (bytes, the node where, the live
    tensors as (bytes, op type, name), largest first)."""
    import numpy as np
    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    nodes = {n.name: n for n in graph.node}
    outputs = {o.name for o in graph.output}
    runs = [e for e in trace if e.get("name") == "model_run"]
    end = runs[0]["ts"] + runs[0]["dur"] if runs else float("inf")
    events = sorted((e for e in trace if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")
                     and e["ts"] <= end), key=lambda e: e["ts"])
    order, size = [], {}
    for e in events:
        n = nodes.get(e["name"][: -len("_kernel_time")])
        if n is None:
            continue
        order.append(n)
        for out, shape in zip(n.output, e["args"].get("output_type_shape", []), strict=False):
            ((dtype, dims),) = shape.items()
            size[out] = int(np.prod(dims)) * (8 if "64" in dtype else 1 if "bool" in dtype else 4)
    last = {t: i for i, n in enumerate(order) for t in n.input}
    live: dict[str, tuple[int, str, str]] = {}
    best: tuple[int, str, list[tuple[int, str, str]]] = (0, "", [])
    for i, n in enumerate(order):
        live.update({o: (size[o], n.op_type, o) for o in n.output if o in size and o not in outputs})
        total = sum(v[0] for v in live.values())
        if total > best[0]:
            best = (total, f"{n.op_type} {n.name}", sorted(live.values(), reverse=True))
        for t in [*n.input, *n.output]:
            if t in live and last.get(t, -1) <= i:
                del live[t]
    return best


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="gpt2")
    training_arguments(ap, batch=8, steps_help="profiled steps")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--live", action="store_true", help="the tensors live together at the static peak")
    ap.add_argument("--ort", action="append", default=[], help="KEY=VALUE: a SessionOptions attribute")
    ap.set_defaults(ort_b=[])  # training.ours reads it: a second session's options, none here
    ap.add_argument("--workdir", help="where the HF checkpoint is written (default: the system's temp dir)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    hf = training.hf_model(args.workload, args)
    vocab = hf.config.vocab_size
    optimized = Path(tempfile.mkdtemp(dir=args.workdir)) / "gradient.onnx"
    if args.live:  # the graph onnxruntime runs, after its own rewrites: the profile names its nodes
        args.ort = [*args.ort, f"optimized_model_filepath={optimized}"]
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        hf.save_pretrained(tmp)
        del hf
        t0 = time.perf_counter()
        (rt,), nodes = training.ours(args.workload, Path(tmp), args, profile=not args.no_profile)
        build = time.perf_counter() - t0
    rss_built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    xs = training.batches(vocab, args, args.steps + 1)
    times = []
    for x in xs:
        t = time.perf_counter()
        rt.step({"x": x}, 1e-4)
        times.append(time.perf_counter() - t)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if hasattr(rt, "update_binding"):  # the split step (runtimes.OrtSplitStep): its two halves timed apart
        halves = []
        for x in xs:
            rt.binding.bind_cpu_input("x", x)
            t0 = time.perf_counter()
            rt.session.run_with_iobinding(rt.binding)
            t1 = time.perf_counter()
            rt.update.run_with_iobinding(rt.update_binding)
            halves.append((t1 - t0, time.perf_counter() - t1))
        print("gradient graph / update graph s: " + " ".join(f"{g:.2f}/{u:.3f}" for g, u in halves)
              + f" (update: {len(rt.update_inputs)} inputs, {len(rt.pieces)} pieces)")
    print(f"build {build:.1f} s, {nodes} IR nodes, {len(rt.proto.graph.node)} ONNX nodes; "
          f"step s: {' '.join(f'{t:.2f}' for t in times)}; peak RSS after build {rss_built:.0f} MiB, "
          f"after steps {peak:.0f} MiB")
    if args.no_profile:
        return 0
    profile = Path(rt.session.end_profiling())  # in a directory of its own (backends/onnx/sessions.py)
    trace = json.loads(profile.read_text())
    shutil.rmtree(profile.parent, ignore_errors=True)
    per_op, largest = summarize(trace)
    total = sum(per_op.values())
    print(f"\nkernel time per step {total / 1e3:.0f} ms, by op type:")
    for op, us in sorted(per_op.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"  {op:28s} {us / 1e3:9.1f} ms {us / total:6.1%}")
    print(f"\nlargest outputs (of {len(largest)} nodes; sum {sum(s[0] for s in largest) / 2**20:.0f} MiB):")
    for size, op, node, shape in largest[:args.top]:
        print(f"  {size / 2**20:8.1f} MiB {op:20s} {node[:50]:50s} {shape}")
    if args.live:
        total, where, tensors = live_at_peak(trace, optimized)
        print(f"\nstatic peak of intermediates {total / 2**20:.0f} MiB, at {where[:70]}; live there:")
        for size, op, name in tensors[:args.top]:
            print(f"  {size / 2**20:8.1f} MiB {op:20s} {name[:60]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"per_op_us": per_op, "times": times, "peak_rss_mib": peak,
                                               "largest": largest[:200]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
