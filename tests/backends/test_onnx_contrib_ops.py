"""contrib_ops: onnxruntime's GroupQueryAttention and SkipSimplifiedLayerNormalization where they compute what
the standard ops do, and the decode step's cache in buffers the attention appends to. Each is checked against
the standard lowering (itself checked against HF) and the interpreter."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from pseudoformer.backends.onnx import OnnxRunner, to_onnx
from pseudoformer.base.errors import BackendError, UsageError
from pseudoformer.deploy import lower
from pseudoformer.generation.generator import Generator
from pseudoformer.generation.runtimes import PAST_LENGTH
from pseudoformer.model import Model, load
from pseudoformer.passes.quantize import QuantizeOptions
from tests.backends.contrib_graphs import differences

TINY = ["L=2", "d_e=64", "H=4", "H_kv=2", "d_mlp=128", "N_V=100"]


def _model(path: str = "models/llama.alg", d_attn: int = 16, extra: tuple[str, ...] = ()) -> Model:
    return load(path, defines=[*TINY, f"d_attn={d_attn}", *extra])


def _ops(model) -> Counter:  # noqa: ANN001
    return Counter(n.op_type for n in model.graph.node)


@pytest.mark.parametrize("d_attn", [16, 8])
def test_a_compiled_llama_uses_the_kernels_and_computes_the_same(d_attn: int) -> None:
    """d = 16: the rotation goes inside GroupQueryAttention; d = 8 (not a multiple of 16, which the kernel
    wants for its rotation): RotaryEmbedding stays, the attention is still the kernel's."""
    m = _model(d_attn=d_attn)
    onnx_model = lower(m, contrib_ops=True)
    ops = _ops(onnx_model)
    layers = 2
    assert ops["GroupQueryAttention"] == layers and ops["Attention"] == 0
    assert ops["RotaryEmbedding"] == (0 if d_attn == 16 else 2 * layers)
    assert ops["SkipSimplifiedLayerNormalization"] == 2 * layers and ops["RMSNormalization"] == 1
    x = np.random.default_rng(0).integers(0, 100, (2, 9))
    want = m.run(x=x)
    got = OnnxRunner(onnx_model).run({"x": x})
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("path", "causal"), [("models/gpt2.alg", True), ("models/bert.alg", False)])
def test_layer_norm_models_fuse_their_residual_sums(path: str, causal: bool) -> None:
    """x + y (+ a bias) read by a layer norm is SkipLayerNormalization, pre-norm (GPT-2) and post-norm
    (BERT); BERT's attention is bidirectional, so it keeps ONNX's Attention."""
    m = load(path, defines=["L=2"])
    onnx_model = lower(m, contrib_ops=True)
    ops = _ops(onnx_model)
    assert ops["SkipLayerNormalization"] == 4 and ops["GroupQueryAttention"] == (2 if causal else 0)
    feeds = {n.attrs["name"]: np.random.default_rng(1).integers(0, 100, (2, 7)) for n in m.graph.inputs}
    want, got = m.run(**feeds), OnnxRunner(onnx_model).run(feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5)


def test_the_graphs_are_those_recorded_before_the_fusions_became_passes() -> None:
    """The Llama's and GPT-2's compiled, prefill and decode-step graphs, fp32 and int4 (and fp16, opset 21),
    with and without contrib ops: the op counts the ONNX lowerings made when they fused, and the outputs
    on fixed inputs (recorded on one CPU: other CPUs' kernels may round differently, so not bit for bit)."""
    changed, worst = differences()
    assert not changed
    assert worst < 1e-4


def test_without_the_option_the_file_is_standard_onnx() -> None:
    ops = _ops(lower(_model()))
    assert ops["GroupQueryAttention"] == ops["SkipSimplifiedLayerNormalization"] == 0 and ops["Attention"] == 2


@pytest.mark.parametrize(("d_attn", "batch", "prompt"), [(16, 2, 7), (8, 1, 1), (16, 1, 12)])
def test_generation_with_the_cache_in_buffers_equals_the_standard_decoder(d_attn: int, batch: int,
                                                                          prompt: int) -> None:
    m = _model(d_attn=d_attn)
    plain, fast = Generator(m, threads=2), Generator(m, threads=2, contrib_ops=True)
    assert fast.runtime.buffered and PAST_LENGTH in {i.name for i in fast.runtime.step_model.graph.input}
    ops = _ops(fast.runtime.step_model)
    assert ops["GroupQueryAttention"] == 2  # the last layer's cut queries too
    # d = 16: the last layer's one query is the packed product's last row, rotated inside like the others'
    # (no RotaryEmbedding, no Pad of the query); d = 8 rotates outside the kernel, every layer
    assert ops["RotaryEmbedding"] == (0 if d_attn == 16 else 4)
    x = np.random.default_rng(prompt).integers(0, 100, (batch, prompt))
    a = plain.generate(x, max_new_tokens=10, keep_scores=True, seed=1)
    b = fast.generate(x, max_new_tokens=10, keep_scores=True, seed=1)
    assert a.tokens == b.tokens
    for u, v in zip(a.scores, b.scores, strict=True):
        np.testing.assert_allclose(v, u, rtol=1e-4, atol=1e-5)
    again = fast.generate(x, max_new_tokens=10, keep_scores=True, seed=1)  # fresh buffers, same result
    assert again.tokens == b.tokens


def test_quantized_generation_with_the_kernels_equals_the_quantized_decoder() -> None:
    m = _model()
    opts = QuantizeOptions(bits=4, block_size=32, symmetric=True, embeddings=True)
    plain, fast = Generator(m, quantize=opts), Generator(m, quantize=opts, contrib_ops=True)
    x = np.random.default_rng(3).integers(0, 100, (1, 6))
    a = plain.generate(x, max_new_tokens=8, keep_scores=True, seed=0)
    b = fast.generate(x, max_new_tokens=8, keep_scores=True, seed=0)
    assert a.tokens == b.tokens
    assert max(np.abs(u - v).max() for u, v in zip(a.scores, b.scores, strict=True)) < 1e-4


def test_qwen2_biases_ride_in_the_packed_projection() -> None:
    m = load("models/qwen2.alg", defines=[*TINY, "d_attn=16"])
    plain, fast = Generator(m), Generator(m, contrib_ops=True)
    assert fast.runtime.buffered
    x = np.random.default_rng(4).integers(0, 100, (2, 5))
    a, b = (g.generate(x, max_new_tokens=6, keep_scores=True, seed=0) for g in (plain, fast))
    assert a.tokens == b.tokens
    assert max(np.abs(u - v).max() for u, v in zip(a.scores, b.scores, strict=True)) < 1e-4


@pytest.mark.parametrize("prompt", [2, 9])
def test_mistrals_window_is_the_kernels_local_window(prompt: int) -> None:
    """key j seen by query i iff i − w < j ≤ i is GroupQueryAttention's local_window_size w; prompts shorter
    and longer than the window, and steps past it."""
    m = load("models/mistral.alg", defines=[*TINY, "d_attn=16", "w=3"])
    plain, fast = Generator(m), Generator(m, contrib_ops=True)
    assert fast.runtime.buffered
    nodes = [n for n in fast.runtime.step_model.graph.node if n.op_type == "GroupQueryAttention"]
    assert len(nodes) == 2 and all(a.i == 3 for n in nodes for a in n.attribute if a.name == "local_window_size")
    x = np.random.default_rng(prompt).integers(0, 100, (2, prompt))
    a, b = (g.generate(x, max_new_tokens=7, keep_scores=True, seed=0) for g in (plain, fast))
    assert a.tokens == b.tokens
    assert max(np.abs(u - v).max() for u, v in zip(a.scores, b.scores, strict=True)) < 1e-4


def test_gpt2s_heads_are_the_kernels_too() -> None:
    """Multi-head attention is grouped-query attention with a group of one: GPT-2's packed heads go to the
    kernel (without a rotation), and its cache into buffers; the tokens are the standard decoder's."""
    m = load("models/gpt2.alg", defines=["L=2"])
    plain, fast = Generator(m), Generator(m, contrib_ops=True)
    ops = _ops(fast.runtime.step_model)
    assert fast.runtime.buffered and ops["GroupQueryAttention"] == 2
    assert ops["SkipLayerNormalization"] == 4 and ops["LayerNormalization"] == 1  # the MLP's bias inside
    x = np.random.default_rng(5).integers(0, 1000, (2, 6))
    a, b = (g.generate(x, max_new_tokens=5, keep_scores=True, seed=0) for g in (plain, fast))
    assert a.tokens == b.tokens
    assert max(np.abs(u - v).max() for u, v in zip(a.scores, b.scores, strict=True)) < 1e-4


def test_buffers_are_refused_with_the_reason() -> None:
    m = _model()
    dec = Generator(m).runtime.dec  # type: ignore[attr-defined]
    # a compile's float16 pass keeps the step's inputs fp32: buffers hold a cache of the step's own dtype
    with pytest.raises(BackendError, match="are float32 inputs cast to float16: buffers hold the cache in"):
        to_onnx(dec.step, m.weights, dtype="float16", contrib_ops=True, kv_buffers=PAST_LENGTH)
    with pytest.raises(BackendError, match="no attention over a cache"):
        to_onnx(m.graph, m.weights, contrib_ops=True, kv_buffers=PAST_LENGTH)
    with pytest.raises(BackendError, match="needs contrib_ops"):
        to_onnx(dec.step, m.weights, kv_buffers=PAST_LENGTH)


def test_a_step_past_the_reserved_buffers_is_refused() -> None:
    fast = Generator(_model(), contrib_ops=True)
    runtime = fast.runtime
    runtime.reserve(1, 4)  # type: ignore[attr-defined]
    _, cache = runtime.prefill({"x": np.array([[1, 2, 3, 4]])})
    with pytest.raises(RuntimeError, match="holds 4 positions; 5 were asked for"):
        runtime.step({"x": np.array([[5]])}, cache)


def test_contrib_ops_are_for_the_onnx_backend() -> None:
    with pytest.raises(UsageError, match="onnx backend"):
        Generator(_model(), backend="numpy", contrib_ops=True)
