"""The block-quantized product's code on each CPU path this machine can run: AVX2 (a Haswell target:
ymm registers only) and, where the CPU has it, AVX-512 (the host target: zmm), each exact to the
dequantized reference at one token (decode) and at many (prefill), with a row count that is not a
multiple of the schedule's four-row tile."""

from __future__ import annotations

import numpy as np
import pytest
import tvm_util  # skips without TVM

from pseudoformer.backends.tvm.build import make_target
from pseudoformer.backends.tvm.nbits_kernel import Shape, assembly, build, random_operands

tvm = pytest.importorskip("tvm")


FLAGS = tvm_util.cpu_flags()
PATHS = [
    pytest.param("avx2", marks=pytest.mark.skipif(not {"avx2", "fma"} <= FLAGS, reason="this CPU has no AVX2")),
    pytest.param("host", marks=pytest.mark.skipif("avx512f" not in FLAGS,
                                                  reason="this CPU has no AVX-512: the host path is the AVX2 one")),
]


def _target(path: str) -> object:
    if path == "host":
        return make_target("llvm")
    return tvm.target.Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("shape", [Shape(52, 96, 4, 32, False), Shape(30, 128, 4, 16, True),
                                   Shape(20, 256, 8, 64, True), Shape(33, 256, 4, 128, False)],
                         ids=lambda s: f"n{s.n}-k{s.k}-{s.bits}bit-block{s.block_size}-{'zp' if s.zero_points else 'sym'}")
def test_each_cpu_path_is_exact_at_one_token_and_at_many(path: str, shape: Shape) -> None:
    lib = build(shape, _target(path))
    code = assembly(lib)
    if path == "avx2":
        assert "ymm" in code and "zmm" not in code
    elif shape.block_size * shape.bits // 8 >= 16:  # 16 lanes (a 4-bit block of 16 has 8: one ymm)
        assert "zmm" in code
    ops, w = random_operands(shape, seed=shape.n)
    dev = tvm.cpu()
    for m in (1, 7):
        x = np.random.default_rng(m).standard_normal((m, shape.k)).astype(np.float32)
        y = tvm.runtime.tensor(np.zeros((m, shape.n), np.float32), dev)
        lib["main"](*(tvm.runtime.tensor(a, dev) for a in [x, *ops]), y)
        want = x.astype(np.float64) @ w.T.astype(np.float64)
        assert np.abs(y.numpy() - want).max() <= 1e-4 * np.abs(want).max(), m
