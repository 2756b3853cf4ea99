#!/usr/bin/env python3
"""Which attention op should the ONNX lowering emit for ORT CPU? One GPT-2-small layer's attention.

  onnx-4d     ONNX Attention (opset 23) on [batch, heads, seq, d], with the head reshape/transposes
              in and out — what backends/onnx/lower.py emits for the IR's head-batched attention
  onnx-3d     ONNX Attention on [batch, seq, heads·d] with q_num_heads/kv_num_heads: no transposes
  ms-mha      com.microsoft MultiHeadAttention on [batch, seq, heads·d], unidirectional
  ms-attn     com.microsoft Attention: the QKV projection fused in (its time includes the projection)
  proj+onnx   the same projection as MatMul + Add + Split, then onnx-3d: ms-attn's fair comparison
  parts-4d    by parts, as torch.onnx exports it: softmax(q kᵀ · scale + causal mask) v on the heads
              (the lowering's form for opsets before 23); the −∞ mask is a precomputed initializer here

Causal, 12 heads of 64, batch 1, fp32, 2 threads. The variants alternate in blocks of tight loops
(common/harness.py; run by run round-robin, the seq-512 figures contradicted each other); the figure
is the median over `--blocks` blocks of each block's mean.
Every variant's output is checked against onnx-4d.

    python benchmarks/bench_attention_ops.py [--seqs 128 512] [--blocks 10] [--runs 20]
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

H, D_HEAD = 12, 64
D = H * D_HEAD


def _vi(name: str, shape: list | None) -> onnx.ValueInfoProto:
    return h.make_tensor_value_info(name, T.FLOAT, shape)


def _session(nodes: list, inputs: list[str], seq: int, inits: list, threads: int, ms: bool = False) -> ort.InferenceSession:
    opsets = [h.make_opsetid("", 23)] + ([h.make_opsetid("com.microsoft", 1)] if ms else [])
    g = h.make_graph(nodes, "attention", [_vi(n, [1, seq, D]) for n in inputs], [_vi("y", None)], initializer=inits)
    m = h.make_model(g, opset_imports=opsets, ir_version=10)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def variants(seq: int, threads: int, w: np.ndarray, b: np.ndarray) -> dict[str, tuple[ort.InferenceSession, str]]:
    shp4 = h.make_tensor("shp4", T.INT64, [4], [0, 0, H, D_HEAD])
    shp3 = h.make_tensor("shp3", T.INT64, [3], [0, 0, D])
    heads = []
    for n in "qkv":
        heads += [h.make_node("Reshape", [n, "shp4"], [n + "r"]), h.make_node("Transpose", [n + "r"], [n + "t"], perm=[0, 2, 1, 3])]
    scale = 1 / np.sqrt(D_HEAD)
    four = heads + [h.make_node("Attention", ["qt", "kt", "vt"], ["y4"], is_causal=1, scale=scale),
                    h.make_node("Transpose", ["y4"], ["yt"], perm=[0, 2, 1, 3]), h.make_node("Reshape", ["yt", "shp3"], ["y"])]
    three = [h.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1, scale=scale, q_num_heads=H, kv_num_heads=H)]
    mha = [h.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], domain="com.microsoft", num_heads=H,
                       unidirectional=1, scale=scale)]
    wi = h.make_tensor("W", T.FLOAT, list(w.shape), w.tobytes(), raw=True)
    bi = h.make_tensor("b", T.FLOAT, list(b.shape), b.tobytes(), raw=True)
    split = h.make_tensor("split", T.INT64, [3], [D, D, D])
    fused = [h.make_node("Attention", ["x", "W", "b"], ["y"], domain="com.microsoft", num_heads=H, unidirectional=1)]
    proj = [h.make_node("MatMul", ["x", "W"], ["p"]), h.make_node("Add", ["p", "b"], ["pb"]),
            h.make_node("Split", ["pb", "split"], ["q", "k", "v"], axis=2), *three]
    keep = np.tril(np.ones((seq, seq), dtype=bool))
    mask = h.make_tensor("mask", T.FLOAT, [seq, seq], np.where(keep, 0, -np.inf).astype(np.float32).tobytes(), raw=True)
    sc = h.make_tensor("sc", T.FLOAT, [], [scale])
    parts = heads[:] + [h.make_node("Transpose", ["kt"], ["ktt"], perm=[0, 1, 3, 2]),
                        h.make_node("MatMul", ["qt", "ktt"], ["s0"]), h.make_node("Mul", ["s0", "sc"], ["s1"]),
                        h.make_node("Add", ["s1", "mask"], ["s2"]), h.make_node("Softmax", ["s2"], ["p"], axis=-1),
                        h.make_node("MatMul", ["p", "vt"], ["y4"]),
                        h.make_node("Transpose", ["y4"], ["yt"], perm=[0, 2, 1, 3]), h.make_node("Reshape", ["yt", "shp3"], ["y"])]
    return {
        "onnx-4d": (_session(four, ["q", "k", "v"], seq, [shp4, shp3], threads), "qkv"),
        "onnx-3d": (_session(three, ["q", "k", "v"], seq, [], threads), "qkv"),
        "ms-mha": (_session(mha, ["q", "k", "v"], seq, [], threads, ms=True), "qkv"),
        "ms-attn": (_session(fused, ["x"], seq, [wi, bi], threads, ms=True), "x"),
        "proj+onnx": (_session(proj, ["x"], seq, [wi, bi, split], threads), "x"),
        "parts-4d": (_session(parts, ["q", "k", "v"], seq, [shp4, shp3, mask, sc], threads), "qkv"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--blocks", type=int, default=10)
    ap.add_argument("--runs", type=int, default=20, help="timed runs per block")
    common_arguments(ap)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((D, 3 * D)) * 0.05).astype(np.float32)
    b = (rng.standard_normal(3 * D) * 0.05).astype(np.float32)
    print(f"# attention ops on ORT {ort.__version__} CPU, {args.threads} threads, load {os.getloadavg()[0]:.1f}; "
          f"ms per run, median of {args.blocks} blocks of {args.runs} runs")
    print()
    print("| seq | " + " | ".join(["onnx-4d", "onnx-3d", "ms-mha", "ms-attn", "proj+onnx", "parts-4d"]) + " |")
    print("|---|" + "---|" * 6)
    for seq in args.seqs:
        x = rng.standard_normal((1, seq, D)).astype(np.float32)
        qkv = x @ w + b
        feeds = {"qkv": {"q": qkv[..., :D], "k": qkv[..., D:2 * D], "v": qkv[..., 2 * D:]}, "x": {"x": x}}
        vs = variants(seq, args.threads, w, b)
        ref = vs["onnx-4d"][0].run(None, feeds["qkv"])[0]
        for name, (s, feed) in vs.items():
            err = np.abs(s.run(None, feeds[feed])[0] - ref).max()
            assert err < 1e-4, f"{name} differs from onnx-4d by {err}"
        t = block_medians({n: partial(s.run, None, feeds[feed]) for n, (s, feed) in vs.items()},
                          blocks=args.blocks, runs=args.runs)
        print(f"| {seq} | " + " | ".join(f"{v * 1e3:.2f}" for v in t.values()) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
