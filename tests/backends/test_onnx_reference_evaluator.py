"""Portable ONNX: ONNX's own reference evaluator (onnx.reference) runs every fp32 model we compile, by
default (standard ops only), and agrees with the IR interpreter.

ONNX Runtime is one implementation of the standard; the reference evaluator is the standard's own
reading of each op. A model that only ORT runs (a com.microsoft op, or a standard op used outside
its specification where ORT happens to be lenient) fails here. Covered: the whole models at -O0 and
-O2 (fused Attention with q_num_heads/kv_num_heads, RotaryEmbedding, RMSNormalization,
LayerNormalization, Mistral's windowed mask), GPT-2 with padding masks, and the derived decode-step
graphs of the decoders, prefill and one cached step, fed the cache the evaluator itself produced.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from pseudoformer.deploy import lower
from pseudoformer.generation.generator import Generator
from pseudoformer.generation.runtimes import NumpyRuntime, empty_cache
from pseudoformer.model import Model, load

MODELS = Path(__file__).resolve().parents[2] / "models"
SMALL = dict(H=2, d_e=8, d_mlp=16, d_attn=4, d_mid=4, ell_max=40, N_V=11)
LLAMA = dict(L=2, H=4, H_kv=2, d_e=16, d_attn=4, d_mlp=24, N_V=11)
DEFINES = {
    "gpt2": SMALL | dict(L=2),
    "bert": SMALL | dict(L=2, d_f=8),
    "bart": SMALL | dict(L_enc=2, L_dec=2),
    "transformer": SMALL | dict(L_enc=2, L_dec=2),
    "llama": LLAMA,
    "mistral": LLAMA | dict(w=3),  # shorter than the sequences below, so the window hides keys
    "qwen2": LLAMA,
}
DECODERS = ("gpt2", "llama", "mistral", "qwen2")
TOL = 1e-5


def _load(name: str) -> Model:
    return load(MODELS / f"{name}.alg", defines=[f"{k}={v}" for k, v in DEFINES[name].items()], seed=3)


def _feed(m: Model, batch: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch * 100 + seq)
    names = [str(i.attrs["name"]) for i in m.graph.inputs]
    return {n: rng.integers(0, 11, (batch, seq), dtype=np.int64) for n in names}


def _output(m: Model) -> str:
    return m.graph.outputs[0][0]


@pytest.mark.parametrize("level", [0, 2])
@pytest.mark.parametrize("name", tuple(DEFINES))
def test_the_reference_evaluator_runs_each_model(name: str, level: int) -> None:
    m = _load(name)
    proto = lower(m, opt_level=level)
    assert {o.domain for o in proto.opset_import} <= {"", "ai.onnx"}, "the default model must use standard ops only"
    runner = ReferenceEvaluator(proto)
    for batch, seq in ((2, 7), (1, 1)):
        feed = _feed(m, batch, seq)
        (got,) = runner.run(None, feed)
        np.testing.assert_allclose(got, m.run(**feed)[_output(m)], rtol=TOL, atol=TOL)


def test_the_reference_evaluator_runs_padding_masks() -> None:
    m = _load("gpt2")
    runner = ReferenceEvaluator(lower(m, padding_mask=True))
    x = _feed(m, 2, 6)["x"]
    mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], dtype=np.int64)
    (got,) = runner.run(None, {"x": x, "attention_mask": mask})
    # The padded example's real positions see only real keys: they equal the unpadded run of its prefix.
    (short,) = runner.run(None, {"x": x[1:, :4], "attention_mask": mask[1:, :4]})
    np.testing.assert_allclose(got[1:, :4], short, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(got[:1], m.run(x=x[:1])["Y"], rtol=TOL, atol=TOL)


@pytest.mark.parametrize("name", DECODERS)
def test_the_reference_evaluator_runs_the_cached_decode_step(name: str) -> None:
    m = _load(name)
    gen = Generator(m, backend="onnx")
    dec = gen.decoder
    assert dec is not None
    runner = ReferenceEvaluator(gen.runtime.step_model)
    reference = NumpyRuntime(dec, gen.output, gen.weights)
    names = list(runner.output_names)
    x = _feed(m, 2, 5)["x"]
    feeds = [{"x": x}, {"x": np.array([[3], [7]], dtype=np.int64)}]
    cache_ref = empty_cache(dec, feeds[0])  # the step graph prefills from an empty cache, as ORT's runtime does
    cache_ev = dict(cache_ref)
    for feed in feeds:
        values = dict(zip(names, runner.run(None, {**feed, **cache_ev}), strict=True))
        want, cache_ref = reference.step(feed, cache_ref)
        np.testing.assert_allclose(values[gen.output], want, rtol=TOL, atol=TOL)
        cache_ev = {s.past_key: values[s.present_key] for s in dec.slots} | {
            s.past_value: values[s.present_value] for s in dec.slots}
    assert {v.shape[0] for v in cache_ev.values()} == {2}
    assert 6 in next(iter(cache_ev.values())).shape, "the cache holds the prompt and the new token"
