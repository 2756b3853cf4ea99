#!/usr/bin/env python3
"""TVM backend benchmark: GPT-2 (or BERT) through TVM against the same model's ONNX on ONNX Runtime.

In one process, on batch 1 at each sequence length, after warm-up, with interleaved repetitions
(a pause at each switch: ORT's idle threads spin on after a run and slow what runs next):

  tvm        pseudoformer's TVM backend (-O2; weights passed at run time, or --params bind)
  ort        pseudoformer's ONNX backend (-O2) on ONNX Runtime CPU

It reports the median and best time of each, TVM's compile/save/load times and ORT's lowering and
session time, and the kernels' own rate: the matmul shapes of GPT-2 small (x·W with W packed as
TVM runs it, and ORT's MatMul on the same shapes) in GFLOP/s. --processes N times each backend in
processes of its own instead; --generate times Generator(..., backend="tvm") against "onnx".
Needs apache-tvm (pip install pseudoformer[tvm]) and onnxruntime.

    python benchmarks/bench_tvm.py                       # GPT-2 small (random weights), seq 128
    python benchmarks/bench_tvm.py --seqs 32 128 512 --reps 20 --json out.json
    python benchmarks/bench_tvm.py --threads 1           # one core each: fair on a busy machine
    python benchmarks/bench_tvm.py --quick               # a 2-layer toy, as a smoke test
    python benchmarks/bench_tvm.py --model bert --seqs 128 512 --threads 2 --no-matmuls
    python benchmarks/bench_tvm.py --generate            # per token: prompt 128, 32 new, greedy
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from common.harness import common_arguments, round_robin

MATMULS = [(768, 2304), (768, 768), (768, 3072), (3072, 768)]  # GPT-2 small's (K, N) per layer
# Seconds before each timed run when two backends alternate (round_robin): ORT's idle worker threads
# spin on for tens of milliseconds after a run and slow whatever runs next.
PAUSE = 0.3
QUICK = ["L=2", "H=2", "d_e=64", "d_mlp=256", "d_attn=32", "d_mid=32", "N_V=1000", "ell_max=256"]


def _time(fns: dict[str, Callable[[], Any]], reps: int) -> dict[str, list[float]]:
    """Seconds per run: a warm-up round, then `reps` rounds in a fixed order; PAUSE before each run
    when both backends alternate."""
    return round_robin(fns, reps=reps, warmup=1, gap_s=PAUSE, rotate=False)


def _summary(ts: list[float]) -> dict[str, float]:
    return {"median_ms": 1e3 * statistics.median(ts), "best_ms": 1e3 * min(ts)}


def _inputs(m: Any, seq: int) -> dict[str, np.ndarray]:
    vocab = int(m.graph.meta.get("hyperparameters", {}).get("N_V", 1000))
    return {"x": np.random.default_rng(seq).integers(0, vocab, (1, seq), dtype=np.int64)}


def time_one(backend: str, model: str, defines: list[str], seqs: list[int], reps: int, params: str,
             threads: int | None) -> dict[str, Any]:
    """One backend alone in this process: build it, then per sequence length one warm-up and `reps` runs."""
    from pseudoformer.backends.onnx import OnnxRunner
    from pseudoformer.backends.tvm import compile_graph
    from pseudoformer.deploy import lower
    from pseudoformer.model import load
    from pseudoformer.optimize import optimize

    m = load(model, defines=defines)
    if backend == "tvm":
        run = compile_graph(optimize(m.graph, 2), m.weights, tvm_params=params).run
    else:
        run = OnnxRunner(lower(m, opt_level=2), threads=threads).run
    out: dict[str, Any] = {"load_average": os.getloadavg()[0], "seqs": {}}
    for seq in seqs:
        x = _inputs(m, seq)
        out["seqs"][str(seq)] = _time({backend: lambda x=x: run(x)}, reps)[backend]
    return out


def bench_model(model: str, defines: list[str], seqs: list[int], reps: int, params: str,
                threads: int | None, processes: int = 0) -> dict[str, Any]:
    """TVM against ORT on `model`: compile and deploy times, the outputs' difference, run times.

    processes=0 times both in this process, runs interleaved with a pause at each switch (_time).
    processes=N runs each backend in a process of its own instead, N of each, alternating (reps/N
    runs each): a cross-check that the two thread pools in one process do not skew the figures.
    """
    from pseudoformer.backends.onnx import OnnxRunner
    from pseudoformer.backends.tvm import compile_graph, load_model
    from pseudoformer.deploy import lower
    from pseudoformer.model import load
    from pseudoformer.optimize import optimize

    m = load(model, defines=defines)
    t0 = time.perf_counter()
    compiled = compile_graph(optimize(m.graph, 2), m.weights, tvm_params=params)
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        path = compiled.save(Path(d) / "model.so")
        t2 = time.perf_counter()
        size = path.stat().st_size
        loaded = load_model(path)
        t3 = time.perf_counter()
        loaded.run({"x": np.zeros((1, 4), np.int64)})
        t4 = time.perf_counter()
    t5 = time.perf_counter()
    runner = OnnxRunner(lower(m, opt_level=2), threads=threads)
    t6 = time.perf_counter()
    result: dict[str, Any] = {
        "model": model, "defines": defines, "params": params,
        "parameters": int(sum(w.size for w in m.weights.values())),
        "tvm_compile_s": t1 - t0, "tvm_lower_s": compiled.timings["lower_s"],
        "tvm_export_s": t2 - t1, "so_bytes": size, "tvm_load_s": t3 - t2, "tvm_first_run_s": t4 - t3,
        "ort_lower_and_session_s": t6 - t5, "seqs": {},
    }
    print(f"{model}: tvm compile {t1 - t0:.1f} s (lowering, folding and packing {compiled.timings['lower_s']:.1f} s, "
          f"TVM {compiled.timings['compile_s']:.1f} s), save {t2 - t1:.1f} s ({size / 1e6:.1f} MB .so), "
          f"load {t3 - t2:.1f} s, first run {t4 - t3:.1f} s; ort: lowering and session {t6 - t5:.1f} s", flush=True)
    errors, times = {}, {}
    for seq in seqs:
        x = _inputs(m, seq)
        a, b = compiled.run(x), runner.run(x)
        errors[seq] = max(float(np.abs(a[k] - b[k]).max()) for k in a)
        if not processes:
            times[seq] = _time({"tvm": lambda x=x: compiled.run(x), "ort": lambda x=x: runner.run(x)}, reps)
    if processes:
        del compiled, loaded, runner
        times = {seq: {"tvm": [], "ort": []} for seq in seqs}
        loads = []
        for _ in range(processes):
            for backend in ("tvm", "ort"):
                cmd = [sys.executable, __file__, "--time-one", backend, "--model", model, "--params", params,
                       "--reps", str(max(reps // processes, 1)), "--seqs", *map(str, seqs),
                       *(["--threads", str(threads)] if threads else []), *(f"-D{d}" for d in defines)]
                done = subprocess.run(cmd, capture_output=True, text=True, check=True)
                one = json.loads(done.stdout.strip().splitlines()[-1])
                loads.append(one["load_average"])
                for seq in seqs:
                    times[seq][backend] += one["seqs"][str(seq)]
        result["processes"] = processes
        result["load_average_during"] = loads
    for seq in seqs:
        ts, err = times[seq], errors[seq]
        row = {k: _summary(v) for k, v in ts.items()}
        row["runs"] = {k: len(v) for k, v in ts.items()}
        row["tvm_over_ort"] = row["tvm"]["median_ms"] / row["ort"]["median_ms"]
        row["max_abs_diff"] = err
        result["seqs"][seq] = row
        print(f"{model} seq {seq}: tvm {row['tvm']['median_ms']:.1f} ms (best {row['tvm']['best_ms']:.1f}), "
              f"ort {row['ort']['median_ms']:.1f} ms (best {row['ort']['best_ms']:.1f}), "
              f"ratio {row['tvm_over_ort']:.2f}, max |diff| {err:.2g}", flush=True)
    return result


def bench_generate(model: str, defines: list[str], prompt_len: int, new: int, rounds: int) -> dict[str, Any]:
    """Generator(..., backend="tvm") against backend="onnx": greedy, batch 1, whole generations
    alternating (after one warm-up each, which for TVM also loads its kernels), PAUSE between.

    Per generation: prefill_seconds and the median of its decode steps (Generation.step_seconds);
    reported: the medians over the rounds, and TVM / ORT.
    """
    from pseudoformer.generation import Generator, Sampling
    from pseudoformer.model import load

    m = load(model, defines=defines)
    gens, build_s = {}, {}
    for backend in ("tvm", "onnx"):
        t = time.perf_counter()
        gens[backend] = Generator(m, backend=backend)
        build_s[backend] = time.perf_counter() - t
    prompt = _inputs(m, prompt_len)["x"][0].tolist()
    greedy = Sampling(temperature=0)
    runs: dict[str, list[Any]] = {b: [] for b in gens}
    loads = []
    for i in range(rounds + 1):
        for backend, gen in gens.items():
            time.sleep(PAUSE)
            g = gen.generate(prompt, max_new_tokens=new, sampling=greedy)
            if i:  # round 0 warms up
                runs[backend].append(g)
        loads.append(os.getloadavg()[0])
    out: dict[str, Any] = {"model": model, "defines": defines, "prompt": prompt_len, "new_tokens": new,
                           "rounds": rounds, "load_average_during": loads,
                           "same_tokens": all(g.tokens == runs["onnx"][0].tokens for rs in runs.values() for g in rs)}
    for backend, rs in runs.items():
        steps = [statistics.median(g.step_seconds) for g in rs]
        out[backend] = {"build_s": build_s[backend],
                        "prefill_ms": 1e3 * statistics.median(g.prefill_seconds for g in rs),
                        "prefill_best_ms": 1e3 * min(g.prefill_seconds for g in rs),
                        "step_ms": 1e3 * statistics.median(steps), "step_best_ms": 1e3 * min(steps)}
    out["step_tvm_over_ort"] = out["tvm"]["step_ms"] / out["onnx"]["step_ms"]
    out["prefill_tvm_over_ort"] = out["tvm"]["prefill_ms"] / out["onnx"]["prefill_ms"]
    tv, on = out["tvm"], out["onnx"]
    print(f"{model} generate, prompt {prompt_len}, {new} new: per token tvm {tv['step_ms']:.1f} ms "
          f"(best {tv['step_best_ms']:.1f}), ort {on['step_ms']:.1f} ms (best {on['step_best_ms']:.1f}), "
          f"ratio {out['step_tvm_over_ort']:.2f}; prefill tvm {tv['prefill_ms']:.0f} ms "
          f"(best {tv['prefill_best_ms']:.0f}), ort {on['prefill_ms']:.0f} ms (best {on['prefill_best_ms']:.0f}), "
          f"ratio {out['prefill_tvm_over_ort']:.2f}; build tvm {tv['build_s']:.1f} s, ort {on['build_s']:.1f} s; "
          f"same tokens: {out['same_tokens']}", flush=True)
    return out


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
    common_arguments(ap, threads=None)
    ap.add_argument("--generate", action="store_true",
                    help="time generation instead (Generator on tvm and onnx, greedy): --prompt, --new-tokens")
    ap.add_argument("--prompt", type=int, default=128, help="prompt length for --generate (default 128)")
    ap.add_argument("--new-tokens", type=int, default=32, help="tokens generated for --generate (default 32)")
    ap.add_argument("--processes", type=int, default=0,
                    help="time each backend in N processes of its own, alternating (default 0: one process, "
                    "runs interleaved)")
    ap.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                    help="a hyperparameter of the model, e.g. -D L=2")
    ap.add_argument("--time-one", choices=["tvm", "ort"], help=argparse.SUPPRESS)  # a child of --processes
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        os.environ["TVM_NUM_THREADS"] = str(args.threads)  # read when TVM's thread pool starts
    defines = (QUICK + (["d_f=64"] if "bert" in args.model else []) if args.quick else []) + args.defines
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
    if args.time_one:  # defines already hold --quick's
        print(json.dumps(time_one(args.time_one, args.model, args.defines, args.seqs, args.reps, args.params,
                                  args.threads)))
        return 0
    if args.generate:
        out["generate"] = bench_generate(args.model, defines, args.prompt, 4 if args.quick else args.new_tokens,
                                         2 if args.quick else args.reps)
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))
        return 0
    out["model"] = bench_model(args.model, defines, args.seqs, reps, args.params, args.threads, args.processes)
    if not args.no_matmuls and not args.quick:
        out["matmuls"] = bench_matmuls(max(args.seqs), reps * 3, args.threads)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
