"""The int8-activation 4-bit product (backends/tvm/nbits_int8.py) on each integer dot product this CPU can
run: AVX2's vpmaddubsw (a Haswell target), AVX-VNNI (an Alder Lake target) and AVX-512 VNNI (the host),
each equal to numpy's emulation of the same arithmetic (int8 activations per block, integer sums, then
the scales); and a model generating with it, its scores within the error that rounding activations to
int8 makes, its tokens those of the float32 reference."""

from __future__ import annotations

import numpy as np
import pytest
import tvm_util  # skips without TVM

from pseudoformer.backends.tvm import nbits_int8 as q8
from pseudoformer.backends.tvm.build import make_target
from pseudoformer.backends.tvm.nbits_kernel import Shape, assembly, random_operands

tvm = pytest.importorskip("tvm")


FLAGS = tvm_util.cpu_flags()
PATHS = [
    pytest.param("haswell", "avx2", marks=pytest.mark.skipif(not {"avx2", "fma"} <= FLAGS, reason="no AVX2")),
    pytest.param("alderlake", "avxvnni", marks=pytest.mark.skipif("avx_vnni" not in FLAGS, reason="no AVX-VNNI")),
    pytest.param("host", "avx512vnni", marks=pytest.mark.skipif("avx512_vnni" not in FLAGS, reason="no AVX-512 VNNI")),
]
INSTRUCTION = {"avx2": "vpmaddubsw", "avxvnni": "vpdpbusd", "avx512vnni": "vpdpbusd"}


@pytest.mark.parametrize(("cpu", "kind"), PATHS)
@pytest.mark.parametrize("shape", [Shape(52, 96, 4, 32, False), Shape(30, 128, 4, 16, True),
                                   Shape(64, 256, 4, 64, True), Shape(33, 256, 4, 128, False)],
                         ids=lambda s: f"n{s.n}-k{s.k}-block{s.block_size}-{'zp' if s.zero_points else 'sym'}")
def test_each_dot_product_path_computes_the_emulated_int8_product(cpu: str, kind: str, shape: Shape) -> None:
    target = make_target("llvm") if cpu == "host" else tvm.target.Target({"kind": "llvm", "mcpu": cpu})
    assert q8.isa(target) == kind
    kb = shape.k // shape.block_size
    n16 = -(-shape.n // q8.ROWS)
    lib = tvm.compile(tvm.IRModule({"main": q8.matmul_int8_func(n16, kb, shape.block_size, kind)}), target=target)
    code = assembly(lib)
    assert INSTRUCTION[kind] in code and (kind == "avx512vnni") == ("zmm" in code)
    ops, w = random_operands(shape, seed=shape.n)
    zp = ops[2] if shape.zero_points else None
    weights = [q8.rows16_codes(ops[0]), q8.rows16_scales(ops[1]), q8.rows16_zero_points(zp, shape.n, kb)]
    dev = tvm.cpu()
    for m in (1, 5):
        x = np.random.default_rng(m).standard_normal((m, shape.k)).astype(np.float32)
        xq, xs, xsum = q8.quantize_x_reference(x, shape.block_size)
        y = tvm.runtime.tensor(np.zeros((m, n16 * q8.ROWS), np.float32), dev)
        lib["main"](*(tvm.runtime.tensor(a, dev) for a in [xq, xs, xsum, *weights]), y)
        xd = (xq.reshape(m, kb, -1).astype(np.float64) * xs[..., None]).reshape(m, shape.k)
        want = xd @ w.T.astype(np.float64)
        assert np.abs(y.numpy()[:, :shape.n] - want).max() <= 1e-5 * np.abs(want).max(), m
        exact = x.astype(np.float64) @ w.T
        assert np.abs(want - exact).max() <= 2e-2 * np.abs(exact).max()  # what int8 activations cost


@pytest.mark.parametrize("shape", [Shape(52, 96, 4, 32, False), Shape(64, 256, 4, 64, True)],
                         ids=["n52-k96-block32-sym", "n64-k256-block64-zp"])
def test_the_kernel_that_quantizes_its_activations_is_the_two_kernels_bit_for_bit(shape: Shape) -> None:
    """quantizes=True: x in float32, quantized inside the kernel as quantize_x_reference does, then the product;
    equal bit for bit to the product on quantize_x_reference's outputs, at one token and at prefill's tiles."""
    target = make_target("llvm")
    kind, kb, n16 = q8.isa(target), shape.k // shape.block_size, -(-shape.n // q8.ROWS)
    plain = tvm.compile(tvm.IRModule({"main": q8.matmul_int8_func(n16, kb, shape.block_size, kind)}), target=target)
    fused = tvm.compile(tvm.IRModule({"main": q8.matmul_int8_func(n16, kb, shape.block_size, kind, quantizes=True)}),
                        target=target)
    ops, _ = random_operands(shape, seed=shape.k)
    zp = ops[2] if shape.zero_points else None
    weights = [tvm.runtime.tensor(a) for a in (q8.rows16_codes(ops[0]), q8.rows16_scales(ops[1]),
                                               q8.rows16_zero_points(zp, shape.n, kb))]
    for m in (1, 3, 9):
        x = np.random.default_rng(m).standard_normal((m, shape.k)).astype(np.float32)
        x[0, : shape.block_size] = 0.0  # a block of zeros: scale 0, codes 0
        want, got = (tvm.runtime.tensor(np.zeros((m, n16 * q8.ROWS), np.float32)) for _ in range(2))
        plain["main"](*(tvm.runtime.tensor(a) for a in q8.quantize_x_reference(x, shape.block_size)), *weights, want)
        fused["main"](tvm.runtime.tensor(x), *weights, got)
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=f"{m} tokens")


def test_generation_with_int8_activations_stays_near_the_float_reference() -> None:
    from pseudoformer.generation import Generator, Sampling
    from pseudoformer.model import load
    from pseudoformer.passes.quantize import QuantizeOptions

    model = load("models/qwen2.alg", defines=["L=2", "H=4", "H_kv=2", "d_e=64", "d_mlp=96", "N_V=100", "d_attn=16"])
    opts = QuantizeOptions(bits=4, block_size=32, embeddings=True, accuracy_level=4)
    prompt = np.random.default_rng(5).integers(0, 100, (2, 5))
    greedy = Sampling(temperature=0)
    gen = Generator(model, backend="tvm", quantize=opts, int8_activations=True)
    assert any(name.endswith("#rows16") for name in gen.runtime.step_model.meta["params"])  # type: ignore[attr-defined]
    got = gen.generate(prompt, max_new_tokens=6, sampling=greedy, keep_scores=True)
    want = Generator(model, backend="numpy", quantize=opts).generate(prompt, max_new_tokens=6, sampling=greedy,
                                                                     keep_scores=True)
    assert got.tokens == want.tokens
    for g, w in zip(got.scores, want.scores, strict=True):
        assert np.abs(g - w).max() <= 3e-2 * max(1.0, np.abs(w).max())


def test_int8_activations_are_refused_where_there_is_no_int4_tvm_product() -> None:
    from pseudoformer.base.errors import UsageError
    from pseudoformer.generation import Generator
    from pseudoformer.model import load

    model = load("models/llama.alg", defines=["L=1", "H=2", "H_kv=1", "d_e=32", "d_mlp=64", "N_V=50", "d_attn=16"])
    for backend, quantize in (("onnx", "int4"), ("tvm", None)):
        with pytest.raises(UsageError, match="int8 activations"):
            Generator(model, backend=backend, quantize=quantize, int8_activations=True)
