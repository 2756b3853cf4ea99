"""TVM's decode step with its cache in buffers (passes/kv_buffers.py, attention_kernel.buffered_attention_func):
the compiled step against the interpreter running the same step, the buffers written in place, buffers made once
per generation and grown when a step needs more room (the interpreter's tokens all the same), and a step past their
end refused by the kernel rather than written. Whole generations against the interpreter: test_tvm_decode_step.py,
tests/generation/test_generate_tvm*.py."""

from __future__ import annotations

import numpy as np
import pytest
import tvm_util  # noqa: F401  (skips without TVM)

from pseudoformer.base.errors import BackendError
from pseudoformer.generation import Generator, Sampling
from pseudoformer.generation.api import prepare
from pseudoformer.generation.tvm_runtime import TvmRuntime, _buffered
from pseudoformer.ir import Op
from pseudoformer.ir.interpreter import run
from pseudoformer.model import load
from pseudoformer.passes.kv_buffers import CAPACITY, LENGTH
from pseudoformer.passes.kv_cache import PAST

TINY = ["L=2", "H=4", "H_kv=2", "d_e=64", "d_mlp=96", "N_V=100", "d_attn=16"]
GREEDY = Sampling(temperature=0)


@pytest.fixture(scope="module")
def generators() -> dict[str, Generator]:
    model = load("models/llama.alg", defines=TINY, seed=4)
    return {b: Generator(model, backend=b) for b in ("numpy", "tvm")}


def _runtime(generators: dict[str, Generator]) -> TvmRuntime:
    runtime = generators["tvm"].runtime
    assert isinstance(runtime, TvmRuntime)
    return runtime


def _feed(runtime: TvmRuntime, batch: int, new: int, past: int, capacity: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch + new + past)
    feed: dict[str, np.ndarray] = {"x": rng.integers(0, 100, (batch, new)), LENGTH: np.array(past, dtype=np.int64)}
    for n in runtime.step_graph.inputs:
        if n.dtype.is_float:
            shape = [batch if d == "batch" else capacity if d == CAPACITY else d for d in n.type.shape]
            feed[n.attrs["name"]] = rng.standard_normal(shape).astype(np.float32)
    return feed


def test_the_generator_runs_the_step_in_buffers(generators: dict) -> None:
    runtime = _runtime(generators)
    assert runtime.buffered is not None and runtime.buffers is not None
    assert [n for n in runtime.step_graph.nodes() if n.op is Op.BUFFERED_ATTENTION]
    assert not [n for n in runtime.step_graph.nodes() if n.op is Op.CONCAT and PAST in n.src[0].shape]


@pytest.mark.parametrize(("batch", "new", "past"), [(1, 1, 6), (2, 3, 4), (1, 5, 0)])
def test_the_compiled_step_writes_the_callers_buffers_as_the_interpreter_computes(generators: dict, batch: int,
                                                                                  new: int, past: int) -> None:
    """(1, 1, ·) runs the function specialised to one token, the others main."""
    import tvm

    runtime = _runtime(generators)
    feed = _feed(runtime, batch, new, past, capacity=past + new + 2)
    want = run(runtime.step_graph, feed, generators["tvm"].weights)
    on_device = {k: tvm.runtime.tensor(v) if v.dtype == np.float32 else v for k, v in feed.items()}
    got = runtime.step_model.run(on_device, keep=runtime._cache_outputs)
    np.testing.assert_allclose(got[runtime.output], want[runtime.output], rtol=1e-4, atol=1e-4)
    for s in runtime.buffered.slots:  # type: ignore[union-attr]
        for past_name, present in ((s.past_key, s.present_key), (s.past_value, s.present_value)):
            given, returned = np.from_dlpack(on_device[past_name]), np.from_dlpack(got[present])
            assert returned.ctypes.data == given.ctypes.data, "the present is not the buffer it was given"
            np.testing.assert_allclose(given[..., :past + new, :], want[present][..., :past + new, :],
                                       rtol=1e-5, atol=1e-5)
            # the positions after the new ones are untouched
            np.testing.assert_array_equal(given[..., past + new:, :], feed[past_name][..., past + new:, :])


def test_the_kernel_refuses_a_step_past_the_buffers_end(generators: dict) -> None:
    runtime = _runtime(generators)
    feed = _feed(runtime, 1, 1, past=4, capacity=4)
    with pytest.raises(BackendError, match="rejected"):
        runtime.step_model.run(feed)


def test_the_buffers_are_made_once_written_in_place_and_grown_when_a_step_needs_room(generators: dict) -> None:
    runtime = _runtime(generators)
    buffers = runtime.buffers
    assert buffers is not None
    prompt = np.random.default_rng(6).integers(0, 100, (1, 3))
    want = generators["numpy"].generate(prompt, max_new_tokens=8, sampling=GREEDY).tokens[0]
    buffers.clear()  # whatever an earlier test left
    runtime.reserve(1, 4)  # room for one new token after the prompt: the second step grows them
    held = _addresses(buffers.values)
    scores, cache = runtime.prefill({"x": prompt})
    assert _addresses(buffers.values) == held  # written in place: the presents are the buffers given
    tokens = [int(np.argmax(scores[0, -1]))]
    capacities = []
    for _ in range(7):
        scores, cache = runtime.step({"x": np.array([[tokens[-1]]])}, cache)
        tokens.append(int(np.argmax(scores[0, -1])))
        capacities.append(buffers.capacity)
    assert tokens == want
    assert capacities == [4, 8, 8, 8, 8, 16, 16] and cache == {LENGTH: 10}
    runtime.reserve(1, 12)  # the next generation's: those held fit, and are kept
    assert buffers.capacity == 16


def _addresses(values: dict) -> dict[str, int]:
    return {k: np.from_dlpack(v).ctypes.data for k, v in values.items()}


def test_a_model_whose_attention_has_a_bias_keeps_the_concatenating_step() -> None:
    """ALiBi's bias is no operand the kernel takes: the step in buffers is not made (checked before compiling)."""
    alibi = prepare("tests/generation/masked/alibi.alg", backend="numpy").generator
    assert _buffered(alibi.decoder) is None  # type: ignore[arg-type]
