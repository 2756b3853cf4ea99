"""The quantize pass on GPT-2 (small sizes): which matmuls it quantizes, tied weights, the paper's
layout, the bias, the methods, and generation with the derived key/value cache."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.backends.onnx import OnnxRunner, to_onnx
from pseudoformer.generation import Generator, Sampling
from pseudoformer.ir import Op, interpreter
from pseudoformer.ir.ops.quantized import dequantize
from pseudoformer.ir.verify import verify
from pseudoformer.model import load
from pseudoformer.optimize import optimize
from pseudoformer.passes.quantize import QuantizeOptions, quantize_graph
from pseudoformer.passes.quantize_weights import quantize

SIZES = dict(L=2, H=4, d_e=64, d_mlp=128, d_attn=16, d_mid=16, ell_max=64, N_V=101)
X = np.array([[5, 17, 3, 99, 42, 0, 7], [1, 2, 3, 4, 5, 6, 7]])


@pytest.fixture(scope="module")
def gpt2():
    return load("models/gpt2.alg", defines=[f"{k}={v}" for k, v in SIZES.items()], seed=1)


def count(graph, op: Op) -> int:
    return sum(n.op is op for n in graph.nodes())


def relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def test_every_weight_matmul_and_the_tied_unembedding_are_quantized_by_default(gpt2) -> None:
    # as onnxruntime-genai's int4 does: the unembedding W_eᵀ too, and the embedding tied to it, stored once
    graph = optimize(gpt2.graph, 2)
    q, weights, changed = quantize_graph(graph, gpt2.weights, QuantizeOptions(bits=4))
    verify(q)
    # per layer: packed QKV, W_o, the two MLP matrices; then the unembedding
    assert changed and count(q, Op.MATMUL_NBITS) == 4 * SIZES["L"] + 1 and count(q, Op.MATMUL) == 0
    assert count(q, Op.GATHER) == 0 and count(q, Op.GATHER_NBITS) == 1 and "W_e" not in weights
    assert "layers.0.W.heads.packed.quant" in weights and "layers.1.W_mlp2.scales" in weights
    assert not any(k.startswith("layers.0.W.heads.0.W_") for k in weights)  # replaced, so dropped
    fp32 = interpreter.run(graph, {"x": X}, gpt2.weights)["Y"]
    got = interpreter.run(q, {"x": X}, weights)["Y"]
    assert 0 < relative(got, fp32) < 0.2  # one more 4-bit matrix, read by every logit, than with output=False


def test_output_false_keeps_the_unembedding_and_its_tied_embedding_in_fp32(gpt2) -> None:
    graph = optimize(gpt2.graph, 2)
    q, weights, _ = quantize_graph(graph, gpt2.weights, QuantizeOptions(bits=4, output=False))
    verify(q)
    assert count(q, Op.MATMUL_NBITS) == 4 * SIZES["L"] and count(q, Op.MATMUL) == 1
    assert count(q, Op.GATHER) == 1 and "W_e" in weights
    fp32 = interpreter.run(graph, {"x": X}, gpt2.weights)["Y"]
    assert 0 < relative(interpreter.run(q, {"x": X}, weights)["Y"], fp32) < 0.1


def test_embeddings_option_quantizes_the_tied_pair_once(gpt2) -> None:
    graph = optimize(gpt2.graph, 2)
    q, weights, _ = quantize_graph(graph, gpt2.weights, QuantizeOptions(bits=8, embeddings=True, accuracy_level=0))
    assert count(q, Op.MATMUL) == 0 and count(q, Op.GATHER) == 0 and count(q, Op.GATHER_NBITS) == 1
    assert "W_e" not in weights and [k for k in weights if k.startswith("W_e.")] == \
        ["W_e.quant", "W_e.scales", "W_e.zero_points"]
    gather = next(n for n in q.nodes() if n.op is Op.GATHER_NBITS)
    unembed = next(n for n in q.nodes() if n.op is Op.MATMUL_NBITS and n.shape[-1] == SIZES["N_V"])
    assert gather.src[0] is unembed.src[1]  # one PARAM node, one initializer
    onnx_model = to_onnx(q, weights)
    got = OnnxRunner(onnx_model).run({"x": X})["Y"]
    assert relative(got, interpreter.run(q, {"x": X}, weights)["Y"]) < 1e-4
    fp32 = interpreter.run(graph, {"x": X}, gpt2.weights)["Y"]
    assert relative(got, fp32) < 0.02


def test_the_papers_layout_quantizes_to_the_same_numbers(gpt2) -> None:
    """At -O0 each head's W_q multiplies from the left; its rows are blocked along d_e as the packed
    -O2 matrix's are, so the two quantized models compute the same function."""
    opts = QuantizeOptions(bits=4, embeddings=True)
    literal, w0, _ = quantize_graph(gpt2.graph, gpt2.weights, opts)
    verify(literal)
    assert count(literal, Op.MATMUL_NBITS) == SIZES["L"] * (3 * SIZES["H"] + 3) + 1
    assert count(literal, Op.GATHER_NBITS) == 1 and count(literal, Op.GATHER) == 0
    optimised, w2, _ = quantize_graph(optimize(gpt2.graph, 2), gpt2.weights, opts)
    a = interpreter.run(literal, {"x": X}, w0)["Y"]
    b = interpreter.run(optimised, {"x": X}, w2)["Y"]
    assert relative(a, b) < 1e-5


def test_a_bias_goes_into_the_op_only_when_asked(gpt2) -> None:
    graph = optimize(gpt2.graph, 2)
    with_bias, weights, _ = quantize_graph(graph, gpt2.weights, QuantizeOptions(bias=True))
    without, weights_apart, _ = quantize_graph(graph, gpt2.weights, QuantizeOptions(bias=False))
    biased = [n for n in with_bias.nodes() if n.op is Op.MATMUL_NBITS and n.src[-1].dtype.is_float]
    # QKV's, W_o's, the first MLP matrix's, and W_mlp2's, whose bias is added after the residual
    assert len(biased) == 4 * SIZES["L"]
    assert not any(n.src[-1].dtype.is_float for n in without.nodes() if n.op is Op.MATMUL_NBITS)
    assert count(with_bias, Op.ADD) == count(without, Op.ADD) - 4 * SIZES["L"]
    x = {"x": X}
    got = interpreter.run(with_bias, x, weights)["Y"]
    assert relative(got, interpreter.run(without, x, weights_apart)["Y"]) < 1e-5


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("bits", [4, 8])
def test_mse_clipping_never_loses_to_round_to_nearest(bits, symmetric) -> None:
    w = np.random.default_rng(bits).standard_normal((64, 200)).astype(np.float32)
    w[3, 7] = 9.0  # an outlier, which round to nearest lets stretch its block's step

    def errors(method: str) -> np.ndarray:
        q = quantize(w, bits=bits, block_size=32, symmetric=symmetric, method=method)
        back = dequantize(q.packed, q.scales, q.zero_points, k=200, bits=bits, block_size=32)
        padded = np.zeros((64, 224), np.float32)
        padded[:, :200] = (back - w) ** 2
        return padded.reshape(64, 7, 32).sum(-1)

    mse, rtn = errors("mse"), errors("rtn")
    assert (mse <= rtn * (1 + 1e-6)).all() and mse.sum() < 0.97 * rtn.sum()


@pytest.mark.parametrize("symmetric", [False, True])
def test_balanced_blocks_leave_errors_that_sum_to_at_most_half_a_step(symmetric) -> None:
    w = np.random.default_rng(5).standard_normal((48, 256)).astype(np.float32)
    q = quantize(w, bits=4, block_size=32, symmetric=symmetric, method="balanced")
    err = (w - dequantize(q.packed, q.scales, q.zero_points, k=256, bits=4, block_size=32)).reshape(48, 8, 32)
    assert (np.abs(err.sum(-1)) <= np.abs(q.scales) / 2 + 1e-5).all()
    # so inputs with a mean (here |x|) see far less error than from mse's codes, at a small cost for others
    x = np.abs(np.random.default_rng(6).standard_normal((16, 256))).astype(np.float32)
    m = quantize(w, bits=4, block_size=32, symmetric=symmetric, method="mse")
    err_mse = w - dequantize(m.packed, m.scales, m.zero_points, k=256, bits=4, block_size=32)
    assert np.linalg.norm(x @ err.reshape(48, 256).T) < 0.8 * np.linalg.norm(x @ err_mse.T)


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("method", ["balanced", "mse"])
def test_each_block_is_quantized_as_if_alone(method, symmetric) -> None:
    # The refit rounds go on with only the blocks that improved: a block's codes must not depend on
    # which others share its chunk, or the rounds it was spared would change it.
    w = np.random.default_rng(7).standard_normal((40, 96)).astype(np.float32)
    w[::3] = np.round(w[::3] * 4) / 4  # repeated values: ties in the grid and in balance's order
    whole = quantize(w, bits=4, block_size=32, symmetric=symmetric, method=method)
    for i in (0, 1, 2, 17, 39):
        alone = quantize(w[i:i + 1], bits=4, block_size=32, symmetric=symmetric, method=method)
        np.testing.assert_array_equal(alone.packed[0], whole.packed[i])
        np.testing.assert_array_equal(alone.scales[0], whole.scales[i])
        if not symmetric:
            np.testing.assert_array_equal(alone.zero_points[0], whole.zero_points[i])


def test_an_all_zero_block_stays_zero() -> None:
    w = np.zeros((2, 32), np.float32)
    w[1, :16] = 1.0
    q = quantize(w, bits=4, block_size=16, symmetric=False)
    np.testing.assert_array_equal(dequantize(q.packed, q.scales, q.zero_points, k=32, bits=4, block_size=16), w)



@pytest.mark.parametrize("method", ["rtn", "balanced"])
def test_quantizing_holds_the_outputs_and_a_few_chunks_not_a_code_per_weight(method, monkeypatch) -> None:
    # A tied embedding is the largest matrix a model has (1.6 GB of float32 for Llama-3.2-3B's), and it is
    # quantized while `generate` loads: a byte of codes per weight and pack's temporaries besides (0.6× the
    # float32 matrix, 27 MB here) were held on top of it before each chunk went into the outputs directly.
    import tracemalloc

    import pseudoformer.passes.quantize_weights as quantize_weights

    monkeypatch.setattr(quantize_weights, "_WORKERS", 2)  # chunks in flight at once, each with its temporaries
    w = np.random.default_rng(0).standard_normal((16384, 512)).astype(np.float32)  # 33.5 MB
    tracemalloc.start()
    try:
        q = quantize(w, bits=4, block_size=32, symmetric=False, method=method)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    outputs = q.packed.nbytes + q.scales.nbytes + q.zero_points.nbytes  # 5.4 MB
    assert peak < outputs + 0.25 * w.nbytes, (peak, outputs)  # measured: outputs + 1.5 (rtn) to 5 MB

@pytest.mark.parametrize("backend", ["onnx", "numpy"])
def test_cached_decode_equals_the_quantized_model_uncached(gpt2, backend) -> None:
    opts = QuantizeOptions(bits=4, embeddings=True)
    runs = []
    for cache in (True, False):
        gen = Generator(gpt2, backend=backend, cache=cache, quantize=opts)
        runs.append(gen.generate([[1, 2, 3, 4], [9, 8, 7, 6]], max_new_tokens=8, seed=4,
                                 sampling=Sampling(temperature=0.9), keep_scores=True))
    cached, full = runs
    assert cached.tokens == full.tokens
    assert max(np.abs(a - b).max() for a, b in zip(cached.scores, full.scores, strict=True)) <= 1e-4


def test_quantized_generation_on_onnx_follows_the_reference(gpt2) -> None:
    opts = QuantizeOptions(bits=8, accuracy_level=0)  # the level at which onnxruntime computes what the reference does
    greedy = Sampling(temperature=0)
    a = Generator(gpt2, backend="onnx", quantize=opts).generate([3, 1, 4], max_new_tokens=10, sampling=greedy,
                                                               keep_scores=True)
    b = Generator(gpt2, backend="numpy", quantize=opts).generate([3, 1, 4], max_new_tokens=10, sampling=greedy,
                                                                keep_scores=True)
    assert a.tokens == b.tokens
    assert max(relative(x, y) for x, y in zip(a.scores, b.scores, strict=True)) < 1e-4
