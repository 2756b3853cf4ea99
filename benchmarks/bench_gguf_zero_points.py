"""Why a GGUF's Q4_1 / Q4_K matrices load as fp32: onnxruntime's MatMulNBits with float zero points (what would
keep their −m/d offsets lossless) against uint8 zero points and a plain fp32 MatMul, one row (a decode step) of
SmolLM2's MLP (K 576, N 1536), one thread, the sessions run in turns. `python benchmarks/bench_gguf_zero_points.py`;
the figures are in docs/models.md (GGUF files)."""

from __future__ import annotations

import argparse

import numpy as np
import onnxruntime as ort
from common.harness import block_times, machine_summary
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

K, N, BLOCK = 576, 1536, 32
KB = K // BLOCK
RNG = np.random.default_rng(0)


def session(kind: str, level: int) -> ort.InferenceSession:
    inits = [nh.from_array(RNG.integers(0, 256, (N, KB, BLOCK // 2), dtype=np.uint8), "B"),
             nh.from_array(RNG.uniform(0.01, 0.02, N * KB).astype(np.float32), "s")]
    if kind == "float":
        inits.append(nh.from_array(RNG.uniform(0, 15, N * KB).astype(np.float32), "z"))
    elif kind == "uint8":
        inits.append(nh.from_array(RNG.integers(0, 256, N * ((KB + 1) // 2), dtype=np.uint8), "z"))
    if kind == "fp32":
        inits = [nh.from_array(RNG.standard_normal((K, N)).astype(np.float32), "W")]
        node = helper.make_node("MatMul", ["A", "W"], ["Y"])
    else:
        node = helper.make_node("MatMulNBits", ["A", *(i.name for i in inits)], ["Y"], domain="com.microsoft",
                                K=K, N=N, bits=4, block_size=BLOCK, accuracy_level=level)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, K])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, N])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    print(f"# {machine_summary()}, one thread")
    sessions = {f"{kind} zero points, level {level}": session(kind, level)
                for kind in ("uint8", "float") for level in (0, 4)}
    sessions["fp32 MatMul"] = session("fp32", 0)
    feed = {"A": RNG.standard_normal((1, K)).astype(np.float32)}
    blocks = block_times({name: (lambda s=s: s.run(None, feed)) for name, s in sessions.items()},
                         blocks=30, runs=50, warmup=0)
    times = {name: [b * 1e6 for b in t] for name, t in blocks.items()}
    for name, t in times.items():
        print(f"{name:28s} 10th percentile {np.percentile(t, 10):8.1f} µs, median {np.median(t):8.1f} µs")


if __name__ == "__main__":
    main()
