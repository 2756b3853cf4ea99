"""contrib_ops: onnxruntime's GroupQueryAttention and SkipSimplifiedLayerNormalization where they compute what
the standard ops do, and the decode step's cache in buffers the attention appends to. Each is checked against
the standard lowering (itself checked against HF) and the interpreter."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from pseudoformer.backends.onnx import OnnxRunner, to_onnx
from pseudoformer.deploy import lower
from pseudoformer.errors import BackendError, UsageError
from pseudoformer.generation.generator import Generator
from pseudoformer.generation.runtimes import PAST_LENGTH
from pseudoformer.model import Model, load
from pseudoformer.passes.quantize import QuantizeOptions

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


def test_without_the_option_the_file_is_standard_onnx() -> None:
    ops = _ops(lower(_model()))
    assert ops["GroupQueryAttention"] == ops["SkipSimplifiedLayerNormalization"] == 0 and ops["Attention"] == 2


@pytest.mark.parametrize(("d_attn", "batch", "prompt"), [(16, 2, 7), (8, 1, 1), (16, 1, 12)])
def test_generation_with_the_cache_in_buffers_equals_the_standard_decoder(d_attn: int, batch: int,
                                                                          prompt: int) -> None:
    m = _model(d_attn=d_attn)
    plain, fast = Generator(m, threads=2), Generator(m, threads=2, contrib_ops=True)
    assert fast.runtime.buffered and PAST_LENGTH in {i.name for i in fast.runtime.step_model.graph.input}
    assert _ops(fast.runtime.step_model)["GroupQueryAttention"] == 2  # the last layer's cut queries too
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


def test_a_windowed_attention_keeps_onnx_attention_and_a_cache_of_values() -> None:
    """Mistral's window is not one GroupQueryAttention takes here: its attention stays ONNX's, so the
    cache cannot live in the kernel's buffers; the norms are still fused, and the result is the same."""
    m = load("models/mistral.alg", defines=[*TINY, "d_attn=16", "w=3"])
    plain, fast = Generator(m), Generator(m, contrib_ops=True)
    assert not fast.runtime.buffered
    ops = _ops(fast.runtime.step_model)
    assert ops["GroupQueryAttention"] == 0 and ops["SkipSimplifiedLayerNormalization"] == 4
    x = np.random.default_rng(5).integers(0, 100, (1, 6))
    a, b = (g.generate(x, max_new_tokens=6, keep_scores=True, seed=0) for g in (plain, fast))
    assert a.tokens == b.tokens


def test_buffers_are_refused_with_the_reason() -> None:
    m = load("models/mistral.alg", defines=[*TINY, "d_attn=16", "w=3"])
    dec = Generator(m).runtime.dec  # type: ignore[attr-defined]
    with pytest.raises(BackendError, match="not one GroupQueryAttention takes"):
        to_onnx(dec.step, m.weights, contrib_ops=True, kv_buffers=PAST_LENGTH)
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
