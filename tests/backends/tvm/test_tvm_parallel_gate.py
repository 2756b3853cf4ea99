"""Small kernels run serially (backends/tvm/parallel_gate.py): each parallel loop has a serial twin chosen by its
work at run time, and both twins compute the same exact result. A small product (256 × 256, 32 KB of codes)
takes the serial twin at one token and the parallel one at several; the tall, small-K 2048 × 256 (256 KB, over
the threshold) takes the parallel one at one token too. Both kernels, float32 and int8 activations, at each."""

from __future__ import annotations

import numpy as np
import pytest
import tvm_util  # noqa: F401  (skips without TVM)

from pseudoformer.backends.tvm import nbits_int8 as q8
from pseudoformer.backends.tvm.build import make_target
from pseudoformer.backends.tvm.nbits_kernel import Shape, build, random_operands, scheduled
from pseudoformer.backends.tvm.nbits_schedule import MIN_PARALLEL_BYTES

tvm = pytest.importorskip("tvm")

TALL = Shape(256, 256)  # 32 KB of codes: serial at one token
WIDE = Shape(2048, 256)  # 256 KB: parallel at one token


def test_the_float_kernel_gates_its_parallel_loop_on_the_call_s_work() -> None:
    script = scheduled(TALL, make_target("llvm")).script()
    assert "T.parallel(T.int64(64))" in script  # 256 rows / 4 a task
    assert f">= T.int64({MIN_PARALLEL_BYTES})" in script  # …taken only above the threshold
    assert "else:\n            for n_0, m_1 in T.grid(T.int64(64), m):" in script  # …else the serial twin


@pytest.mark.parametrize("shape", [TALL, WIDE], ids=["small-256x256", "tall-2048x256"])
def test_the_float_kernel_is_exact_on_either_twin(shape: Shape) -> None:
    lib = build(shape, make_target("llvm"))
    ops, w = random_operands(shape, seed=3)
    dev = tvm.cpu()
    for m in (1, 2, 9):  # one token: serial for TALL, parallel for WIDE; more: parallel
        x = np.random.default_rng(m).standard_normal((m, shape.k)).astype(np.float32)
        y = tvm.runtime.tensor(np.zeros((m, shape.n), np.float32), dev)
        lib["main"](*(tvm.runtime.tensor(a, dev) for a in [x, *ops]), y)
        want = x.astype(np.float64) @ w.T.astype(np.float64)
        assert np.abs(y.numpy() - want).max() <= 1e-4 * np.abs(want).max(), m


@pytest.mark.parametrize("shape", [TALL, WIDE], ids=["small-256x256", "tall-2048x256"])
def test_the_int8_kernel_decodes_serially_below_the_threshold_and_is_exact(shape: Shape) -> None:
    target = make_target("llvm")
    kb, n16 = shape.k // shape.block_size, shape.n // q8.ROWS
    func = q8.matmul_int8_func(n16, kb, shape.block_size, q8.isa(target))
    parallels = func.script().count("T.parallel(")
    assert parallels == (1 if shape is TALL else 2)  # prefill always splits; decode only when large
    lib = tvm.compile(tvm.IRModule({"main": func}), target=target)
    ops, w = random_operands(shape, seed=4)
    weights = [q8.rows16_codes(ops[0]), q8.rows16_scales(ops[1]), q8.rows16_zero_points(None, shape.n, kb)]
    dev = tvm.cpu()
    for m in (1, 6):
        x = np.random.default_rng(m).standard_normal((m, shape.k)).astype(np.float32)
        xq, xs, xsum = q8.quantize_x_reference(x, shape.block_size)
        y = tvm.runtime.tensor(np.zeros((m, shape.n), np.float32), dev)
        lib["main"](*(tvm.runtime.tensor(a, dev) for a in [xq, xs, xsum, *weights]), y)
        xd = (xq.reshape(m, kb, -1).astype(np.float64) * xs[..., None]).reshape(m, shape.k)
        want = xd @ w.T.astype(np.float64)
        assert np.abs(y.numpy() - want).max() <= 1e-5 * np.abs(want).max(), m
