"""bench_int4.py --dtype fp32's products part: each distinct matrix of SmolLM2-135M at one token in float32, as
GB/s of weights read against the streaming bandwidth measured in the same run.

Contenders: TVM's decode schedule (backends/tvm/matvec_schedule.py, the kernel a model's function takes at up to
four rows), TVM's GEMM schedule at one row (the schedule decoding took before), both on W packed as the model
packs it (backends/tvm/matmul_kernel.py), and onnxruntime's MatMul of x [1, K] by W [K, N].
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

import numpy as np

# (N, K) of each distinct product of SmolLM2-135M: q and o, k and v, gate and up, down, the tied unembedding
PRODUCTS = {"q, o": (576, 576), "k, v": (192, 576), "gate, up": (1536, 576), "down": (576, 1536),
            "unembedding": (49152, 576)}
QUICK_PRODUCTS = {"small": (192, 576), "odd": (200, 333)}
CELLS = ("decode", "gemm", "ort")


def _ort_matmul(w: np.ndarray, threads: int) -> object:
    from common.decoding import ort_gemv

    return ort_gemv(w, threads)


def products_part(args: argparse.Namespace, bandwidth: float,
                  block_medians: Callable[..., dict[str, float]]) -> None:
    import tvm

    from pseudoformer.backends.tvm import matmul_kernel as mk
    from pseudoformer.backends.tvm.build import make_target

    target = make_target("llvm")
    products = QUICK_PRODUCTS if args.quick else PRODUCTS
    print(f"## one product at one token, float32, {args.threads} threads (TVM: TVM_NUM_THREADS="
          f"{os.environ.get('TVM_NUM_THREADS')}); GB/s of weights read and % of {bandwidth / 1e9:.1f} GB/s")
    print()
    print("| product | N × K | weights | TVM decode schedule (ours) | TVM GEMM schedule (before) | ORT MatMul |")
    print("|---|---|---|---|---|---|")
    dev = tvm.cpu()
    for name, (n, k) in products.items():
        x, w, wp = mk.operands(n, k, 1)
        want = x[0].astype(np.float64) @ w.astype(np.float64)
        calls: dict[str, Callable[[], object]] = {}
        for cell, decode in (("decode", True), ("gemm", False)):
            f = mk.build(n, k, target, decode=decode)["main"]  # symbolic rows, as in a model
            targs = [tvm.runtime.tensor(a, dev) for a in (x, wp, np.zeros((1, 1, wp.shape[0] * wp.shape[2]),
                                                                           np.float32))]
            f(*targs)
            assert np.abs(targs[-1].numpy()[0, :, :n] - want).max() <= 1e-4 * np.abs(want).max(), (name, cell)
            calls[cell] = lambda f=f, a=targs: f(*a)
        session = _ort_matmul(w, args.threads)
        calls["ort"] = lambda s=session, x=x[0]: s.run(None, {"x": x})  # type: ignore[attr-defined]
        times = block_medians(calls, blocks=5, runs=20 if n * k < 5e6 else 5)
        nbytes = w.nbytes
        cells = [f"{times[c] * 1e3:.3f} ms, {nbytes / times[c] / 1e9:.1f} GB/s "
                 f"({100 * nbytes / times[c] / bandwidth:.0f} %)" for c in CELLS]
        print(f"| {name} | {n} × {k} | {nbytes / 1e6:.1f} MB | " + " | ".join(cells) + " |", flush=True)
    print()
