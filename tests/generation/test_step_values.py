"""The ONNX decode step's values made once (pseudoformer/generation/step_values.py): greedy ids computed where the
scores are, the token buffer written only by the ArgMax under greedy decoding, the cache buffers sized from the
prompt and max_new_tokens and kept between generations, one binding for every token. All on the CPU provider;
the same code binds CUDA values under provider="cuda"."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from pseudoformer.generation import Generator, Sampling
from pseudoformer.generation.step_values import DeviceScores
from pseudoformer.model import Model, load

GREEDY = Sampling(temperature=0)


def _model() -> Model:
    return load("models/llama.alg", defines=["L=2", "d_e=64", "H=4", "H_kv=2", "d_mlp=128", "N_V=100", "d_attn=16"])


@pytest.fixture(scope="module")
def model() -> Model:
    return _model()


@pytest.fixture(scope="module")
def reference(model: Model) -> Generator:
    return Generator(model, backend="numpy")


@pytest.mark.parametrize("contrib", [True, False])
def test_greedy_ids_on_the_device_are_those_of_the_scores(model: Model, reference: Generator, contrib: bool) -> None:
    gen = Generator(model, threads=1, contrib_ops=contrib)
    assert gen.runtime.buffered is contrib  # type: ignore[attr-defined]
    x = np.random.default_rng(1).integers(0, 100, (2, 5))
    on_device = gen.generate(x, max_new_tokens=9, sampling=GREEDY)
    from_scores = gen.generate(x, max_new_tokens=9, sampling=GREEDY, keep_scores=True)
    assert on_device.tokens == from_scores.tokens == reference.generate(x, max_new_tokens=9, sampling=GREEDY).tokens


@pytest.mark.parametrize("contrib", [True, False])
def test_only_ids_cross_under_greedy_decoding(model: Model, contrib: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Greedy: the scores are never read into numpy and the token buffer is written by the ArgMax alone.
    Sampling: the drawn ids are written, one write a step."""
    gen = Generator(model, threads=1, contrib_ops=contrib)
    x = np.random.default_rng(2).integers(0, 100, (1, 4))
    want = gen.generate(x, max_new_tokens=7, sampling=GREEDY).tokens
    values = gen.runtime.values  # type: ignore[attr-defined]
    writes = []
    tokens = values.tokens
    write = tokens.update_inplace
    monkeypatch.setattr(tokens, "update_inplace", lambda data: (writes.append(np.array(data)), write(data)))

    def no_read(*_: object, **__: object) -> None:
        raise AssertionError("greedy decoding read the scores")

    monkeypatch.setattr(DeviceScores, "__array__", no_read)
    assert gen.generate(x, max_new_tokens=7, sampling=GREEDY).tokens == want
    assert values.tokens is tokens and writes == []
    monkeypatch.undo()
    monkeypatch.setattr(tokens, "update_inplace", lambda data: (writes.append(np.array(data)), write(data)))
    drawn = gen.generate(x, max_new_tokens=7, sampling=Sampling(temperature=1.0), seed=3).tokens
    assert [int(w[0, 0]) for w in writes] == drawn[0][:6]


def test_the_cache_buffers_are_sized_from_the_generation_and_kept(model: Model, reference: Generator) -> None:
    gen = Generator(model, threads=1, contrib_ops=True)
    values = gen.runtime.values  # type: ignore[attr-defined]
    rng = np.random.default_rng(3)
    x = rng.integers(0, 100, (1, 5))
    gen.generate(x, max_new_tokens=6, sampling=GREEDY)
    assert values.capacity == 5 + 6 - 1  # the last new token is never fed back
    held = {name: id(v) for name, v in values.cache.items()}
    binding = values.binding
    shorter = rng.integers(0, 100, (1, 3))
    got = gen.generate(shorter, max_new_tokens=4, sampling=GREEDY)
    assert {name: id(v) for name, v in values.cache.items()} == held and values.binding is binding
    assert got.tokens == reference.generate(shorter, max_new_tokens=4, sampling=GREEDY).tokens
    longer = rng.integers(0, 100, (2, 8))  # another batch, more positions: made anew
    got = gen.generate(longer, max_new_tokens=8, sampling=GREEDY)
    assert values.capacity == 15 and values.batch == 2 and values.binding is not binding
    assert got.tokens == reference.generate(longer, max_new_tokens=8, sampling=GREEDY).tokens


def test_a_step_of_several_tokens_and_a_replaced_session(model: Model) -> None:
    """Tokens fed several at a time go through a binding of their own; a session replaced (as the profiling
    benchmarks replace it) is bound anew, its buffers kept."""
    gen = Generator(model, threads=1, contrib_ops=True)
    runtime = gen.runtime
    x = np.random.default_rng(4).integers(0, 100, (1, 6))
    runtime.reserve(1, 8)  # type: ignore[attr-defined]
    whole = np.array(runtime.prefill({"x": x})[0])
    _, cache = runtime.prefill({"x": x[:, :3]})
    parts = np.array(runtime.step({"x": x[:, 3:]}, cache)[0])
    np.testing.assert_allclose(parts, whole, rtol=1e-5, atol=1e-5)
    want = gen.generate(x, max_new_tokens=5, sampling=GREEDY).tokens
    runtime.runner.session = ort.InferenceSession(str(runtime.step_path),  # type: ignore[attr-defined]
                                                  providers=["CPUExecutionProvider"])
    assert gen.generate(x, max_new_tokens=5, sampling=GREEDY).tokens == want
    assert runtime.values.session is runtime.runner.session  # type: ignore[attr-defined]


@pytest.mark.parametrize("contrib", [True, False])
def test_the_step_values_room_is_cache_buffers_rule(model: Model, contrib: bool) -> None:
    """StepValues keeps the cache in a CacheBuffers (generation/cache_buffers.py), the rule TVM's and the
    interpreter's steps in buffers follow: a batch or more positions than held makes them anew, a prompt without a
    reserve gets twice its length, and a step past the end is refused (onnxruntime's kernel writes within the
    buffers, which are never grown). Without buffers (standard ops) only the batch decides."""
    gen = Generator(model, threads=1, contrib_ops=contrib)
    runtime = gen.runtime
    values = runtime.values  # type: ignore[attr-defined]
    x = np.random.default_rng(5).integers(0, 100, (1, 6))
    runtime.prefill({"x": x})  # type: ignore[attr-defined]  # no reserve
    assert (values.batch, values.capacity) == (1, 12 if contrib else 0)
    # each buffer bound as its slot's past and present
    assert len(values.buffers.values) == (4 if contrib else 0) and len(values.cache) == 2 * len(values.buffers.values)
    assert all(values.cache[p] is b for p, b in values.buffers.values.items())
    tokens = values.tokens
    values.reserve(1, 40)  # more positions: new buffers where the cache is in them, else nothing to make
    assert (values.tokens is tokens) is not contrib and values.capacity == (40 if contrib else 0)
    if contrib:
        _, cache = runtime.prefill({"x": x})  # type: ignore[attr-defined]
        with pytest.raises(RuntimeError, match="the cache holds 40 positions; 41 were asked for"):
            runtime.step({"x": np.zeros((1, 35), np.int64)}, cache)  # type: ignore[attr-defined]

