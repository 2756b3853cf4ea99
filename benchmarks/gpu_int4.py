#!/usr/bin/env python3
"""The int4 kernels on TVM's `cuda` target: a script ready for a machine with an NVIDIA GPU and a TVM whose
CUDA runtime loads (the apache-tvm 0.27.0.post1 wheel ships it as lib/libtvm_runtime_cuda.so, loaded at import
where the NVIDIA driver's libcuda.so.1 and CUDA 13's libcudart.so.13 are found, silently skipped elsewhere:
docs/gpu.md, "TVM on the GPU"). Without it, it compiles these kernels anywhere and runs them nowhere.

What runs on the GPU is what a model compiled with `--backend tvm --target cuda --quantize int4` runs:
nbits.matmul_dequantized, a dequantize stage that dlight's GPU matmul rule inlines into the loads of
the product's tiles (the float weights live in shared memory a tile at a time, never in global
memory), and nbits.gather_nbits for the embedding.

It measures, each checked first against the dequantized reference (1e-4 relative, float32):
  products   each distinct matrix of Qwen2.5-1.5B (q/o, k/v, gate/up, down, the unembedding) at one token
             and at 128, int4 in blocks of 32: time, GB/s of int4 weights read, and that as a share of
             the device's bandwidth measured here (a device-to-device copy of 1 GiB)
  model      a tiny Llama compiled for cuda with --quantize int4 against the interpreter (1e-4)

    python benchmarks/gpu_int4.py              # on a machine with a GPU
    python benchmarks/gpu_int4.py --check      # anywhere: schedules and compiles the kernels for cuda
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from common.harness import machine_summary

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PRODUCTS = {"q, o": (1536, 1536), "k, v": (256, 1536), "gate, up": (8960, 1536), "down": (1536, 8960),
            "unembedding": (151936, 1536)}
ARCH = "sm_80"  # for --check without a GPU; on one, build.make_target reads the device's


def no_gpu_reason() -> str | None:
    """Why this script cannot run its kernels here, or None."""
    import tvm

    if not tvm.runtime.enabled("cuda"):
        return ("this TVM's CUDA runtime did not load (its libtvm_runtime_cuda.so needs the NVIDIA driver's "
                "libcuda.so.1 and CUDA 13's libcudart.so.13: docs/gpu.md)")
    if not tvm.cuda().exist:
        return "no NVIDIA GPU on this machine"
    return None


def cuda_target(arch: str | None = None) -> object:
    import tvm

    from pseudoformer.backends.tvm.build import make_target

    if arch is None:
        return make_target("cuda")
    return tvm.target.Target({"kind": "cuda", "arch": arch}, host="llvm")


def check(arch: str = ARCH) -> list[str]:
    """Schedule and compile every product for cuda (no GPU needed): the names of the kernels built."""
    import tvm

    from pseudoformer.backends.tvm.nbits_kernel import Shape, scheduled

    built = []
    target = cuda_target(arch)
    for name, (n, k) in PRODUCTS.items():
        mod = scheduled(Shape(n, k), target)
        text = mod["main"].script()
        if "threadIdx" not in text or "blockIdx" not in text:
            raise AssertionError(f"{name}: dlight left the product unbound to GPU threads")
        tvm.compile(mod, target=target)
        built.append(name)
    return built


def device_bandwidth() -> float:
    """Bytes per second of a device-to-device copy of 1 GiB (read and write counted)."""
    import tvm

    dev = tvm.cuda()
    a = tvm.runtime.empty((2**28,), "float32", dev)
    b = tvm.runtime.empty((2**28,), "float32", dev)
    best = float("inf")
    for _ in range(10):
        dev.sync()
        start = time.perf_counter()
        a.copyto(b)
        dev.sync()
        best = min(best, time.perf_counter() - start)
    return 2 * a.numpy().nbytes / best if best > 0 else float("nan")


def products(bandwidth: float) -> None:
    import tvm

    from pseudoformer.backends.tvm.nbits_kernel import Shape, build, random_operands

    target, dev = cuda_target(), tvm.cuda()
    print(f"| product | N × K | M | time | GB/s | % of {bandwidth / 1e9:.0f} GB/s |")
    print("|---|---|---|---|---|---|")
    for name, (n, k) in PRODUCTS.items():
        shape = Shape(n, k)
        lib = build(shape, target)
        ops, w = random_operands(shape)
        for m in (1, 128):
            x = np.random.default_rng(m).standard_normal((m, k)).astype(np.float32)
            args = [tvm.runtime.tensor(a, dev) for a in [x, *ops, np.zeros((m, n), np.float32)]]
            lib["main"](*args)
            want = x.astype(np.float64) @ w.T
            assert np.abs(args[-1].numpy() - want).max() <= 1e-4 * np.abs(want).max(), (name, m)
            t = lib.time_evaluator("main", dev, number=20, repeat=5)(*args).median
            print(f"| {name} | {n} × {k} | {m} | {t * 1e6:.1f} µs | {shape.weight_bytes / t / 1e9:.0f} | "
                  f"{100 * shape.weight_bytes / t / bandwidth:.0f} % |")


def model() -> None:
    from pseudoformer.deploy import compile as compile_model
    from pseudoformer.ir import interpreter
    from pseudoformer.model import load
    from pseudoformer.passes.quantize import QuantizeOptions
    from pseudoformer.quantization import quantize_model_graph

    defines = ["L=2", "H=4", "H_kv=2", "d_e=64", "d_attn=16", "d_mlp=128", "N_V=1000"]
    m = load(ROOT / "models/llama.alg", defines=defines)
    compiled = compile_model(ROOT / "models/llama.alg", defines=defines, backend="tvm", target="cuda",
                             quantize="int4", quantize_embeddings=True, accuracy_level=0)
    x = np.random.default_rng(0).integers(0, 1000, (1, 9))
    got = compiled.run(x=x)["Y"]
    graph, weights = quantize_model_graph(m.graph, m.weights, QuantizeOptions(embeddings=True, accuracy_level=0))
    want = interpreter.run(graph, {"x": x}, weights)["Y"]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    print(f"tiny Llama, int4, cuda against the interpreter: max relative error {err:.2g}")
    assert err < 1e-4


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only schedule and compile for cuda (no GPU needed)")
    args = ap.parse_args(argv)
    if args.check:
        print(f"scheduled and compiled for cuda ({ARCH}): {', '.join(check())}")
        return 0
    reason = no_gpu_reason()
    if reason is not None:
        print(f"gpu_int4: {reason}; `--check` compiles the kernels without one", file=sys.stderr)
        return 2
    print(f"# host: {machine_summary()}")
    bandwidth = device_bandwidth()
    print(f"# device-to-device copy: {bandwidth / 1e9:.0f} GB/s")
    products(bandwidth)
    model()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
