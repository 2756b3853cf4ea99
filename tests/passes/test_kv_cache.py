"""The derived incremental decoder: prefill + cached steps give the full re-run's outputs at every step."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from pseudoformer.backends.onnx import to_onnx
from pseudoformer.base.errors import CompileError
from pseudoformer.ir.interpreter import run
from pseudoformer.ir.verify import verify
from pseudoformer.model import load
from pseudoformer.optimize import optimize
from pseudoformer.passes.kv_cache import NotCacheableError, derive_incremental
from pseudoformer.passes.last_position import keep_last_position
from tests.models.test_golden_ir import CASES
from tests.passes.test_semantics import _inputs

DECODERS = {"gpt2": "Y", "alg10_dtransformer": "P", "alg8_edtransformer": "P"}


def _model(name: str):
    source, entry, hyper = CASES[name]
    return load(source, entry=entry, config=os.devnull, defines=[f"{k}={v}" for k, v in hyper.items()])


def _incremental(name: str):
    model = _model(name)
    graph = optimize(model.graph, 2)
    dec = derive_incremental(graph, "x")
    out = DECODERS[name]
    prefill = keep_last_position(dec.prefill, out, dec.positions)
    step = keep_last_position(dec.step, out, dec.positions)
    for g in (dec.prefill, dec.step, prefill, step, *([dec.encoder] if dec.encoder else [])):
        verify(g)
    return model, dec, prefill, step, out


def _encoder_feed(model, batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {n.attrs["name"]: rng.integers(0, 5, size=(batch, 6)) for n in model.graph.inputs if n.attrs["name"] != "x"}


@pytest.mark.parametrize("name", sorted(DECODERS))
@pytest.mark.parametrize("batch,prompt,new", [(2, 3, 4), (1, 1, 5)])
def test_cached_steps_equal_full_rerun(name: str, batch: int, prompt: int, new: int) -> None:
    model, dec, prefill, step, out = _incremental(name)
    rng = np.random.default_rng(batch * 10 + prompt)
    x = rng.integers(0, 5, size=(batch, prompt + new))
    other = _encoder_feed(model, batch, rng)
    enc = run(dec.encoder, other, model.weights) if dec.encoder else {}
    got = run(prefill, {"x": x[:, :prompt], **enc}, model.weights)
    for t in range(prompt, prompt + new + 1):
        full = run(model.graph, {**other, "x": x[:, :t]}, model.weights)[out]
        assert got[out].shape[1] == 1
        np.testing.assert_allclose(got[out][:, 0], full[:, -1], atol=1e-5, rtol=0)
        if t == prompt + new:
            break
        cache = {}
        for s in dec.slots:
            cache[s.past_key], cache[s.past_value] = got[s.present_key], got[s.present_value]
            assert got[s.present_key].shape[-2] == t  # the cache holds every position so far
        got = run(step, {"x": x[:, t:t + 1], **enc, **cache}, model.weights)


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_step_with_empty_cache_is_prefill(name: str) -> None:
    model, dec, prefill, step, out = _incremental(name)
    rng = np.random.default_rng(1)
    other = _encoder_feed(model, 2, rng)
    enc = run(dec.encoder, other, model.weights) if dec.encoder else {}
    x = rng.integers(0, 5, size=(2, 4))
    empty = {}
    for s in dec.slots:
        empty[s.past_key] = np.zeros((2, *s.key_type.shape[1:-2], 0, s.key_type.shape[-1]), np.float32)
        empty[s.past_value] = np.zeros((2, *s.value_type.shape[1:-2], 0, s.value_type.shape[-1]), np.float32)
    a = run(prefill, {"x": x, **enc}, model.weights)
    b = run(step, {"x": x, **enc, **empty}, model.weights)
    for name_ in a:
        np.testing.assert_allclose(a[name_], b[name_], atol=1e-6, rtol=0)


def test_several_new_tokens_per_step() -> None:
    """A step may take more than one token (chunked prefill): causal attention stays bottom-right aligned."""
    model, dec, prefill, step, out = _incremental("gpt2")
    x = np.random.default_rng(2).integers(0, 5, size=(1, 8))  # ℓ_max = 8 in TINY
    got = run(prefill, {"x": x[:, :4]}, model.weights)
    cache = {}
    for s in dec.slots:
        cache[s.past_key], cache[s.past_value] = got[s.present_key], got[s.present_value]
    full_step = run(dec.step, {"x": x[:, 4:], **cache}, model.weights)[out]
    full = run(model.graph, {"x": x}, model.weights)[out]
    np.testing.assert_allclose(full_step, full[:, 4:], atol=1e-5, rtol=0)


def test_encoder_values_are_the_cross_attention_keys_and_values() -> None:
    model, dec, *_ = _incremental("alg8_edtransformer")
    assert dec.encoder is not None
    assert [n.attrs["name"] for n in dec.encoder.inputs] == ["z"]
    # per decoder layer one K and one V of the encoder positions, head-batched: [batch, H, seq_z, d]
    shapes = [n.shape for _, n in dec.encoder.outputs]
    assert len(shapes) == 2 * model.graph.meta["hyperparameters"]["L_dec"]
    assert all(s[0] == "batch" and s[2] == "seq_z" for s in shapes)


@pytest.mark.parametrize("name,line", [("alg9_etransformer", 22), ("bert_encoder", None)])
def test_bidirectional_attention_is_refused_with_its_line(name: str, line: int | None) -> None:
    model = _model(name)
    with pytest.raises(CompileError) as e:
        derive_incremental(optimize(model.graph, 2), "x")
    err = e.value.errors[0]
    assert isinstance(err, NotCacheableError)
    assert "not causal" in err.message
    assert err.pos is not None and err.pos.file.endswith(".alg")
    if line is not None:
        assert err.pos.line == line


def test_unfused_attention_is_refused() -> None:
    model = _model("gpt2")
    with pytest.raises(CompileError) as e:
        derive_incremental(model.graph, "x")  # -O0: the mask and the softmax are still separate ops
    assert all(isinstance(err, NotCacheableError) for err in e.value.errors)


def test_last_position_computes_the_unembedding_for_one_position() -> None:
    model = _model("gpt2")
    graph = optimize(model.graph, 2)
    last = optimize(keep_last_position(graph, "Y", "seq"), 1)
    (_, y), = last.outputs
    assert y.shape == ("batch", 1, model.graph.meta["hyperparameters"]["N_V"])
    assert y.src[0].shape[1] == 1  # the final layer norm's output is already one position
    x = np.random.default_rng(3).integers(0, 5, size=(2, 6))
    np.testing.assert_allclose(run(last, {"x": x}, model.weights)["Y"][:, 0],
                               run(graph, {"x": x}, model.weights)["Y"][:, -1], atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", sorted(set(CASES) - {"alg6_layer_norm"}))  # its output is one vector
def test_last_position_keeps_semantics_everywhere(name: str) -> None:
    model = _model(name)
    graph = optimize(model.graph, 2)
    out, node = graph.outputs[0]
    dims = [d for d in node.shape if isinstance(d, str) and d != "batch"]
    last = keep_last_position(graph, out, dims[-1])
    verify(last)
    feed = _inputs(graph, 2, 5, seed=4)
    want = np.take(run(graph, feed, model.weights)[out], [-1], axis=node.shape.index(dims[-1]))
    np.testing.assert_allclose(run(last, feed, model.weights)[out], want, atol=1e-5, rtol=0)


def test_onnx_step_uses_attention_with_past_inputs() -> None:
    model, dec, prefill, step, out = _incremental("gpt2")
    proto = to_onnx(optimize(step, 1), model.weights)
    attention = [n for n in proto.graph.node if n.op_type == "Attention"]
    assert len(attention) == model.graph.meta["hyperparameters"]["L"]
    assert all(len(n.input) == 6 and len(n.output) == 3 for n in attention)
    assert not [n for n in proto.graph.node if n.op_type == "Concat" and "present" in "".join(n.output)]
    onnx.checker.check_model(proto, full_check=True)
