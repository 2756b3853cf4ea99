#!/usr/bin/env python3
"""TVM backend benchmark: GPT-2 (or BERT) through TVM against the same model's ONNX on ONNX Runtime.

In one process, on batch 1 at each sequence length, after warm-up, with interleaved repetitions:

  tvm        pseudoformer's TVM backend (-O2; weights passed at run time, or --params bind)
  ort        pseudoformer's ONNX backend (-O2) on ONNX Runtime CPU

It reports the median and best time of each, TVM's lower/compile/export times, and the kernels'
own rate: the matmul shapes of GPT-2 small (x·W with W packed as TVM runs it, and ORT's MatMul on
the same shapes) in GFLOP/s. Needs apache-tvm (pip install pseudoformer[tvm]) and onnxruntime.

    python benchmarks/bench_tvm.py                       # GPT-2 small (random weights), seq 128
    python benchmarks/bench_tvm.py --seqs 32 128 512 --reps 20 --json out.json
    python benchmarks/bench_tvm.py --threads 1           # one core each: fair on a busy machine
    python benchmarks/bench_tvm.py --quick               # a 2-layer toy, as a smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MATMULS = [(768, 2304), (768, 768), (768, 3072), (3072, 768)]  # GPT-2 small's (K, N) per layer
QUICK = ["L=2", "H=2", "d_e=64", "d_mlp=256", "d_attn=32", "d_mid=32", "N_V=1000", "ell_max=256"]


def _time(fns: dict[str, Callable[[], Any]], reps: int) -> dict[str, list[float]]:
    """Round-robin timing, so that a noisy neighbour slows every variant alike."""
    for f in fns.values():
        f()
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for name, f in fns.items():
            t = time.perf_counter()
            f()
            out[name].append(time.perf_counter() - t)
    return out


def _summary(ts: list[float]) -> dict[str, float]:
    return {"median_ms": 1e3 * statistics.median(ts), "best_ms": 1e3 * min(ts)}


def bench_model(model: str, defines: list[str], seqs: list[int], reps: int, params: str,
                threads: int | None) -> dict[str, Any]:
    from pseudoformer.backends.onnx import OnnxRunner
    from pseudoformer.backends.tvm import compile_graph, load_model
    from pseudoformer.deploy import lower
    from pseudoformer.optimize import optimize
    from pseudoformer.pipeline import load

    m = load(model, defines=defines)
    t0 = time.perf_counter()
    compiled = compile_graph(optimize(m.graph, 2), m.weights, params=params)
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        path = compiled.save(Path(d) / "model.so")
        t2 = time.perf_counter()
        size = path.stat().st_size
        loaded = load_model(path)
        t3 = time.perf_counter()
        loaded.run({"x": np.zeros((1, 4), np.int64)})
        t4 = time.perf_counter()
    runner = OnnxRunner(lower(m, opt_level=2), threads=threads)
    vocab = int(m.graph.meta.get("hyperparameters", {}).get("N_V", 1000))
    result: dict[str, Any] = {
        "model": model, "defines": defines, "params": params,
        "parameters": int(sum(w.size for w in m.weights.values())),
        "tvm_compile_s": t1 - t0, "tvm_lower_s": compiled.timings["lower_s"],
        "tvm_export_s": t2 - t1, "so_bytes": size, "tvm_load_s": t3 - t2, "tvm_first_run_s": t4 - t3,
        "seqs": {},
    }
    for seq in seqs:
        x = np.random.default_rng(seq).integers(0, vocab, (1, seq), dtype=np.int64)
        a, b = compiled.run({"x": x}), runner.run({"x": x})
        err = max(float(np.abs(a[k] - b[k]).max()) for k in a)
        ts = _time({"tvm": lambda x=x: compiled.run({"x": x}), "ort": lambda x=x: runner.run({"x": x})}, reps)
        row = {k: _summary(v) for k, v in ts.items()}
        row["tvm_over_ort"] = row["tvm"]["median_ms"] / row["ort"]["median_ms"]
        row["max_abs_diff"] = err
        result["seqs"][seq] = row
        print(f"{model} seq {seq}: tvm {row['tvm']['median_ms']:.1f} ms (best {row['tvm']['best_ms']:.1f}), "
              f"ort {row['ort']['median_ms']:.1f} ms (best {row['ort']['best_ms']:.1f}), "
              f"ratio {row['tvm_over_ort']:.2f}, max |diff| {err:.2g}", flush=True)
    return result


def bench_matmuls(m: int, reps: int, threads: int | None) -> list[dict[str, Any]]:
    """x[1, m, K] · W[K, N] alone, as one TVM module (W packed, bound) and one ORT MatMul each."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from pseudoformer.backends.tvm import compile_graph
    from pseudoformer.ir.graph import Graph
    from pseudoformer.ir.node import Node
    from pseudoformer.ir.ops import Op
    from pseudoformer.ir.types import DType, TensorType

    rows = []
    for k, n in MATMULS:
        x = Node(Op.INPUT, (), {"name": "x", "type": TensorType(DType.float32, ("batch", "seq", k))})
        w = Node(Op.PARAM, (), {"name": "W", "type": TensorType(DType.float32, (k, n))})
        g = Graph([x], [("y", Node(Op.MATMUL, (x, w)))], {"entry": "matmul"})
        wv = (np.random.default_rng(0).standard_normal((k, n)) * 0.05).astype(np.float32)
        tvm_model = compile_graph(g, {"W": wv})
        graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "mm",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, m, k])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, n])],
                                  [numpy_helper.from_array(wv, "W")])
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        onnx.checker.check_model(proto)
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        sess = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
        xv = np.random.default_rng(1).standard_normal((1, m, k)).astype(np.float32)
        assert np.abs(tvm_model.run({"x": xv})["y"] - xv @ wv).max() < 1e-3
        ts = _time({"tvm": lambda xv=xv, t=tvm_model: t.run({"x": xv}),
                    "ort": lambda xv=xv, s=sess: s.run(None, {"x": xv})}, reps)
        flop = 2.0 * m * k * n
        row = {"m": m, "k": k, "n": n, **{f"{name}_gflops_median": flop / statistics.median(v) / 1e9
                                        for name, v in ts.items()},
               **{f"{name}_gflops_best": flop / min(v) / 1e9 for name, v in ts.items()}}
        rows.append(row)
        print(f"matmul {m}x{k}x{n}: tvm {row['tvm_gflops_median']:.0f} GFLOP/s (best {row['tvm_gflops_best']:.0f}), "
              f"ort {row['ort_gflops_median']:.0f} (best {row['ort_gflops_best']:.0f})", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gpt2", help="a packaged model or .alg file (default gpt2)")
    ap.add_argument("--seqs", type=int, nargs="+", default=[128])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--params", choices=["bind", "args"], default="args")
    ap.add_argument("--quick", action="store_true", help="a 2-layer toy model, few repetitions")
    ap.add_argument("--no-matmuls", action="store_true", help="skip the matmul kernel rates")
    ap.add_argument("--threads", type=int, help="threads for both TVM and ORT (default: every CPU)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.threads:
        os.environ["TVM_NUM_THREADS"] = str(args.threads)  # read when TVM's thread pool starts
    defines = QUICK if args.quick else []
    reps = 3 if args.quick else args.reps
    out: dict[str, Any] = {"machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                                       "load_average": os.getloadavg()}}
    try:
        import tvm

        out["machine"]["llvm_cpu"] = str(tvm.get_global_func("tvm.codegen.llvm.GetHostCPUName")())
        out["tvm_version"] = tvm.__version__
    except ImportError:
        print("bench_tvm: apache-tvm is not installed: pip install pseudoformer[tvm]", file=sys.stderr)
        return 1
    out["threads"] = args.threads
    out["model"] = bench_model(args.model, defines, args.seqs, reps, args.params, args.threads)
    if not args.no_matmuls and not args.quick:
        out["matmuls"] = bench_matmuls(max(args.seqs), reps * 3, args.threads)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
