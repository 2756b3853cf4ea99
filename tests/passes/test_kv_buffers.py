"""The decode step with its cache in buffers (passes/kv_buffers.py): its interface, the contract the verifier and
the interpreter hold it to, the same outputs as the concatenating step, and the steps it refuses to rewrite."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.generation import Generator, Sampling
from pseudoformer.generation.api import prepare
from pseudoformer.generation.cache_buffers import numpy_buffered_runtime
from pseudoformer.ir import Graph, Node, Op
from pseudoformer.ir.interpreter import InterpreterError, run
from pseudoformer.ir.types import DType, TensorType
from pseudoformer.ir.verify import IRVerifyError, verify
from pseudoformer.model import load
from pseudoformer.passes.kv_buffers import CAPACITY, LENGTH, CacheBufferError, buffered_step
from pseudoformer.passes.kv_cache import PAST

TINY = ["L=2", "H=4", "H_kv=2", "d_e=32", "d_mlp=48", "N_V=50", "d_attn=8"]


@pytest.fixture(scope="module")
def gen() -> Generator:
    return Generator(load("models/llama.alg", defines=TINY, seed=3), backend="numpy")


def _feeds(gen: Generator, past: int, capacity: int, new: int, batch: int = 1) -> tuple[dict, dict]:
    """The concatenating step's feed (`past` cached positions) and the buffered step's (the same positions first in
    buffers of `capacity`, random values after them)."""
    rng = np.random.default_rng(past + capacity)
    dec = gen.decoder
    assert dec is not None
    concat: dict[str, np.ndarray] = {"x": rng.integers(0, 50, (batch, new))}
    buffered: dict[str, np.ndarray] = {"x": concat["x"], LENGTH: np.array(past, dtype=np.int64)}
    for s in dec.slots:
        for name, t in ((s.past_key, s.key_type), (s.past_value, s.value_type)):
            full = rng.standard_normal([batch if d == "batch" else capacity if isinstance(d, str) else d
                                        for d in t.shape]).astype(np.float32)
            buffered[name], concat[name] = full, full[..., :past, :]
    return concat, buffered


def test_the_step_takes_a_length_and_buffers_and_returns_the_buffers_written(gen: Generator) -> None:
    step = buffered_step(gen.decoder)  # type: ignore[arg-type]
    g = step.graph
    assert g.input(LENGTH).type == TensorType(DType.int64, ())
    outputs = dict(g.outputs)
    for s in step.slots:
        for past, present in ((s.past_key, s.present_key), (s.past_value, s.present_value)):
            buffer = g.input(past)
            assert buffer.shape[-2] == CAPACITY
            written = outputs[present]
            assert written.op is Op.GET and written.src[0].op is Op.BUFFERED_ATTENTION
            assert buffer in written.src[0].src[3:5]
    # no attention over a concatenation is left, nor anything sized to the past positions
    assert not [n for n in g.nodes() if n.op is Op.ATTENTION and n.src[1].op is Op.CONCAT]
    assert not [n for n in g.nodes() if isinstance(n.type, TensorType) and PAST in n.shape]


@pytest.mark.parametrize(("past", "new", "batch"), [(5, 1, 1), (3, 4, 2), (0, 6, 1)])
def test_the_step_in_buffers_gives_the_concatenating_steps_outputs(gen: Generator, past: int, new: int,
                                                                    batch: int) -> None:
    dec = gen.decoder
    assert dec is not None
    capacity = past + new + 3
    concat, buffered = _feeds(gen, past, capacity, new, batch)
    want = run(dec.step, concat, gen.weights)
    got = run(buffered_step(dec).graph, buffered, gen.weights)
    np.testing.assert_allclose(got[gen.output], want[gen.output], rtol=1e-5, atol=1e-6)
    for s in dec.slots:
        for past_name, present in ((s.past_key, s.present_key), (s.past_value, s.present_value)):
            np.testing.assert_allclose(got[present][..., :past + new, :], want[present], rtol=1e-6, atol=1e-6)
            # the positions after them are what the buffer held: never read, never written
            np.testing.assert_array_equal(got[present][..., past + new:, :], buffered[past_name][..., past + new:, :])


def test_the_interpreter_refuses_a_step_past_the_buffers_end(gen: Generator) -> None:
    _, buffered = _feeds(gen, past=4, capacity=4, new=1)
    with pytest.raises(InterpreterError, match="hold 4 positions: 4 kept and 1 new do not fit"):
        run(buffered_step(gen.decoder).graph, buffered, gen.weights)  # type: ignore[arg-type]


def test_the_verifier_holds_a_buffer_to_be_an_input_its_attention_alone_reads(gen: Generator) -> None:
    g = buffered_step(gen.decoder).graph  # type: ignore[arg-type]
    buffer = g.input("past.0.key")
    returned = Graph(list(g.inputs), [*g.outputs, ("leak", buffer)], dict(g.meta))
    with pytest.raises(IRVerifyError, match="written over, so it must be a graph input that nothing else reads"):
        verify(returned)
    read = Graph(list(g.inputs), [*g.outputs, ("twice", Node(Op.NEG, (buffer,)))], dict(g.meta))
    with pytest.raises(IRVerifyError, match="operand 3"):
        verify(read)


def test_a_step_whose_attention_has_a_bias_keeps_its_concatenation() -> None:
    """ALiBi's bias is sized to the past and new positions, not to the buffers: refused, saying where."""
    alibi = prepare("tests/generation/masked/alibi.alg", backend="numpy").generator
    with pytest.raises(CacheBufferError, match="has a mask or bias operand"):
        buffered_step(alibi.decoder)  # type: ignore[arg-type]


def test_generating_on_the_interpreter_in_buffers_gives_the_same_tokens_growing_them(gen: Generator) -> None:
    """The interpreter running the step in buffers, its buffers reserved too small so that prefill makes its own
    (twice the prompt) and a later step doubles them: the tokens and scores of the concatenating step."""
    runtime = numpy_buffered_runtime(buffered_step(gen.decoder), gen.output, gen.weights)  # type: ignore[arg-type]
    prompt = np.random.default_rng(2).integers(0, 50, (2, 4))
    greedy = Sampling(temperature=0)
    want = gen.generate(prompt, max_new_tokens=10, sampling=greedy, keep_scores=True)
    concat = gen.runtime
    try:
        gen.runtime = runtime
        runtime.reserve = lambda batch, positions: None  # type: ignore[method-assign]
        got = gen.generate(prompt, max_new_tokens=10, sampling=greedy, keep_scores=True)
    finally:
        gen.runtime = concat
    assert runtime.buffers.capacity == 16  # 8 made by prefill, doubled for the 9th position
    assert got.tokens == want.tokens
    for g, w in zip(got.scores, want.scores, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
