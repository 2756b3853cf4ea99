#!/usr/bin/env python3
"""Does the sparse top-2 mixture of experts (models/examples/moe.alg, TopKExperts, k = 2) cost what two experts cost?

One MoE layer on ONNX Runtime CPU at -O2, two forms with the same weights:

  sparse  TopKExperts: each token's rows go to its two experts (EXPERT_MATMUL: the tokens grouped by expert, one
          MatMul per expert on its tokens, ScatterND back), so only those run
  dense   benchmarks/moe_dense.alg: every expert runs for every token, gates 0 outside the top two

Both are checked to agree first (1e-4), on one token ([1, 1, d_e], a decode step) and on a prompt ([1, ℓ, d_e],
prefill). All four runs alternate in blocks of tight loops (common/harness.py); each figure is the median over
blocks, per token. The sparse/dense ratio should fall with k/E.

    python benchmarks/bench_moe.py [--experts 8] [--seq 128] [--d-e 256] [--d-mlp 1024] [--threads 1]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from common.harness import block_medians, common_arguments

from pseudoformer.backends.onnx import OnnxRunner
from pseudoformer.deploy import lower
from pseudoformer.model import load

HERE = Path(__file__).resolve().parent
SPARSE = HERE.parent / "models" / "examples" / "moe.alg"


def models(experts: int, d_e: int, d_mlp: int, seed: int):  # noqa: ANN201
    sizes = [f"E={experts}", f"d_e={d_e}", f"d_mlp={d_mlp}"]
    sparse = load(SPARSE, entry="TopKExperts", config="/dev/null", defines=[*sizes, "k=2"])
    dense = load(HERE / "moe_dense.alg", config="/dev/null", defines=sizes)
    rng = np.random.default_rng(seed)
    w = {k: (rng.standard_normal(v.shape) / np.sqrt(v.shape[-1])).astype(np.float32) for k, v in sparse.weights.items()}
    sparse.weights = w
    dense.weights = {"W_r": w["W_r"]} | {f"e.{e}.{n}": w[n][e] for e in range(experts) for n in ("W_1", "b_1", "W_2", "b_2")}
    assert sorted(dense.weights) == sorted(load(HERE / "moe_dense.alg", config="/dev/null", defines=sizes).weights)
    return sparse, dense


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--d-e", type=int, default=256)
    ap.add_argument("--d-mlp", type=int, default=1024)
    common_arguments(ap, threads=1)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    sparse, dense = models(args.experts, args.d_e, args.d_mlp, seed=0)
    rng = np.random.default_rng(1)
    xs = {seq: rng.standard_normal((1, seq, args.d_e)).astype(np.float32) for seq in (1, args.seq)}
    runners = {name: OnnxRunner(lower(m, opt_level=2), threads=args.threads) for name, m in
               (("sparse", sparse), ("dense", dense))}
    for x in xs.values():
        got = {name: r.run({"X": x})["Y"] for name, r in runners.items()}
        np.testing.assert_allclose(got["sparse"], got["dense"], rtol=1e-4, atol=1e-4)
    times = block_medians({(name, seq): (lambda r=r, x=x: r.run({"X": x}))
                           for seq, x in xs.items() for name, r in runners.items()},
                          blocks=args.blocks, runs=args.runs)
    for seq in xs:
        what = "one token" if seq == 1 else f"prefill of {seq}"
        per = {name: times[(name, seq)] / seq * 1e6 for name in runners}
        print(f"{what:16s} sparse {per['sparse']:9.1f} µs per token   dense {per['dense']:9.1f}   "
              f"sparse / dense {per['sparse'] / per['dense']:.2f} (k/E = {2 / args.experts:g})")


if __name__ == "__main__":
    main()
