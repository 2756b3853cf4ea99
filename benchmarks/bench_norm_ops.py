#!/usr/bin/env python3
"""Should the ONNX lowering fuse residual + bias + layer norm into com.microsoft SkipLayerNormalization?

One GPT-2-small residual junction, h = x + (m + b), y = LayerNorm(h; γ, β), on [1, seq, 768]:

  onnx        Add(m, b), Add(·, x), LayerNormalization — what backends/onnx/lower.py emits
  ms-skip-ln  SkipLayerNormalization(m, x, γ, β, b) → y, h (h is the op's fourth output)

Both graphs output y and h (pre-norm: h feeds the next residual add), and both run with ORT's graph
optimisations off, so each runs exactly the ops written. The variants alternate in blocks of tight
loops (common/harness.py); the figure is the median over blocks of each block's mean. The outputs are checked against numpy in float64.

    python benchmarks/bench_norm_ops.py [--seqs 1 128 512] [--blocks 10] [--runs 200] [--provider cpu|cuda]
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from functools import partial

import numpy as np
import onnx
import onnxruntime as ort
from common.harness import block_medians, common_arguments
from onnx import TensorProto as T
from onnx import helper as h

D = 768
EPS = 1e-5
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


def graphs(seq: int, rng: np.random.Generator) -> tuple[dict[str, onnx.ModelProto], dict[str, np.ndarray]]:
    gamma, beta, bias = (rng.standard_normal(D).astype(np.float32) for _ in range(3))
    inits = [onnx.numpy_helper.from_array(a, n) for a, n in ((gamma, "gamma"), (beta, "beta"), (bias, "bias"))]
    ins = [h.make_tensor_value_info(n, T.FLOAT, [1, seq, D]) for n in ("m", "x")]
    outs = [h.make_tensor_value_info(n, T.FLOAT, [1, seq, D]) for n in ("y", "h")]
    plain = [h.make_node("Add", ["m", "bias"], ["mb"]), h.make_node("Add", ["mb", "x"], ["h"]),
             h.make_node("LayerNormalization", ["h", "gamma", "beta"], ["y"], axis=-1, epsilon=EPS)]
    fused = [h.make_node("SkipLayerNormalization", ["m", "x", "gamma", "beta", "bias"], ["y", "", "", "h"],
                         domain="com.microsoft", epsilon=EPS)]
    opsets = [h.make_opsetid("", 26), h.make_opsetid("com.microsoft", 1)]
    models = {name: h.make_model(h.make_graph(nodes, name, ins, outs, inits), opset_imports=opsets, ir_version=13)
              for name, nodes in (("onnx", plain), ("ms-skip-ln", fused))}
    return models, {"gamma": gamma, "beta": beta, "bias": bias}


def reference(m: np.ndarray, x: np.ndarray, p: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    hh = m.astype(np.float64) + p["bias"] + x
    mu = hh.mean(-1, keepdims=True)
    var = ((hh - mu) ** 2).mean(-1, keepdims=True)
    return (hh - mu) / np.sqrt(var + EPS) * p["gamma"] + p["beta"], hh


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", type=int, nargs="+", default=[1, 128, 512])
    ap.add_argument("--blocks", type=int, default=10)
    ap.add_argument("--runs", type=int, default=200, help="timed runs per block")
    common_arguments(ap)
    ap.add_argument("--provider", choices=sorted(PROVIDERS), default="cpu")
    args = ap.parse_args(argv)
    provider = PROVIDERS[args.provider]
    if provider not in ort.get_available_providers():
        ap.error(f"onnxruntime {ort.__version__} here has no {provider}")
    rng = np.random.default_rng(0)
    print(f"# residual + bias + layer norm on ORT {ort.__version__} {args.provider}, "
          f"{args.threads} threads, load {os.getloadavg()[0]:.1f}; µs per junction, median of {args.blocks} blocks "
          f"of {args.runs} runs")
    print()
    print("| seq | onnx (Add, Add, LayerNormalization) | ms-skip-ln (SkipLayerNormalization) | ms-skip-ln / onnx |")
    print("|---:|---:|---:|---:|")
    for seq in args.seqs:
        models, params = graphs(seq, rng)
        m, x = (rng.standard_normal((1, seq, D)).astype(np.float32) for _ in range(2))
        want_y, want_h = reference(m, x, params)
        sessions = {}
        for name, model in models.items():
            so = ort.SessionOptions()
            so.intra_op_num_threads = args.threads
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            sessions[name] = ort.InferenceSession(model.SerializeToString(), so, providers=[provider])
            y, hh = sessions[name].run(None, {"m": m, "x": x})
            err = max(np.abs(y - want_y).max(), np.abs(hh - want_h).max())
            if err > 1e-4:
                raise SystemExit(f"{name} at seq {seq} is off the float64 reference by {err:.2e}")
        feed = {"m": m, "x": x}
        t = block_medians({n: partial(s.run, None, feed) for n, s in sessions.items()},
                          blocks=args.blocks, runs=args.runs, warmup=5)
        plain, fused = (t[n] * 1e6 for n in ("onnx", "ms-skip-ln"))
        print(f"| {seq} | {plain:.1f} | {fused:.1f} | {fused / plain:.2f}× |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
