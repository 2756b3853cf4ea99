"""The buffers of a step whose cache is in buffers (passes/kv_buffers.py), and the runtimes that run such a step.

CacheBuffers holds one buffer per past key and value, of a batch size and a capacity, and the rule for their
room: `reserve` makes them for a generation (prompt + new tokens, the last never fed back), keeping those held
when they fit; `make_room` grows them before a step that would run past their end, to twice the capacity (or
what the step needs), copying the positions held: a copy when the capacity doubles, not each token. A buffer
is whatever the backend keeps (a TVM tensor, a numpy array); `allocate` and `view` (numpy's view of it, for
that copy) say how.

BufferedRuntime runs the step on a backend through `run_step` (its inputs by name → its outputs by name):
the cache passed to the generation loop is the length L alone; per token the step gets the token(s), L and
the buffers, and each present it returns is held as the buffer of its slot (on TVM the very buffer it was
given, written in place). The interpreter runs the same step (NumpyBufferedRuntime), which is what the
compiled step is checked against.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from pseudoformer.ir import Graph
from pseudoformer.passes.kv_buffers import CAPACITY, BufferedStep
from pseudoformer.passes.kv_cache import CacheSlot

Cache = dict[str, Any]


class CacheBuffers:
    def __init__(self, slots: tuple[CacheSlot, ...], allocate: Callable[[tuple[int, ...], str], Any],
                 view: Callable[[Any], np.ndarray]) -> None:
        self.slots, self.allocate, self.view = slots, allocate, view
        self.batch = self.capacity = 0
        self.values: dict[str, Any] = {}  # past input name → its buffer

    def _types(self) -> list[tuple[str, Any]]:
        return [(name, t) for s in self.slots for name, t in ((s.past_key, s.key_type), (s.past_value, s.value_type))]

    def _made(self, batch: int, capacity: int) -> dict[str, Any]:
        made = {}
        for name, t in self._types():
            shape = tuple(batch if d == "batch" else capacity if d == CAPACITY else d for d in t.shape)
            if not all(isinstance(d, int) for d in shape):
                raise ValueError(f"the cache buffer {name} has a size known only at run time: {t}")
            made[name] = self.allocate(shape, t.dtype.value)
        return made

    def reserve(self, batch: int, positions: int) -> None:
        """Buffers of `positions` for `batch` rows; those held are kept when they are of the batch and big enough."""
        if positions < 1:
            raise ValueError(f"a cache needs room for at least one position, not {positions}")
        if batch != self.batch or positions > self.capacity:
            self.values = self._made(batch, positions)
            self.batch, self.capacity = batch, positions

    def clear(self) -> None:
        """Let the buffers go (the next generation makes its own)."""
        self.values, self.batch, self.capacity = {}, 0, 0

    def make_room(self, length: int, new: int) -> None:
        """Room for `new` positions after the `length` held: the buffers grown to twice their capacity (or to
        length + new) where they are too small, the held positions copied."""
        if length + new <= self.capacity:
            return
        capacity = max(2 * self.capacity, length + new)
        grown = self._made(self.batch, capacity)
        for name, buffer in self.values.items():
            self.view(grown[name])[..., :length, :] = self.view(buffer)[..., :length, :]
        self.values, self.capacity = grown, capacity

    def update(self, outputs: Mapping[str, Any]) -> None:
        """Hold each present the step returned as its slot's buffer (written in place, it is the same one)."""
        for s in self.slots:
            self.values[s.past_key] = outputs[s.present_key]
            self.values[s.past_value] = outputs[s.present_value]


class BufferedRuntime:
    """A runtime (generation/runtimes.Runtime) of a step in buffers, on the backend that `run_step` calls."""

    def __init__(self, step: BufferedStep, output: str, token_input: str, buffers: CacheBuffers,
                 run_step: Callable[[dict[str, Any]], Mapping[str, Any]]) -> None:
        self.step_graph, self.output, self.token_input = step, output, token_input
        self.buffers, self.run_step = buffers, run_step

    def reserve(self, batch: int, positions: int) -> None:
        self.buffers.reserve(batch, positions)

    def prefill(self, feed: Mapping[str, Any]) -> tuple[np.ndarray, Cache]:
        tokens = np.asarray(feed[self.token_input])
        if tokens.shape[0] != self.buffers.batch or tokens.shape[1] > self.buffers.capacity:
            self.buffers.reserve(tokens.shape[0], 2 * tokens.shape[1])  # no reserve: twice the prompt's length
        return self.step(feed, {self.step_graph.length: 0})

    def step(self, feed: Mapping[str, Any], cache: Cache) -> tuple[np.ndarray, Cache]:
        length = int(cache[self.step_graph.length])
        new = np.asarray(feed[self.token_input]).shape[1]
        self.buffers.make_room(length, new)
        out = self.run_step({**feed, self.step_graph.length: np.array(length, dtype=np.int64),
                             **self.buffers.values})
        self.buffers.update(out)
        return np.asarray(out[self.output])[:, -1:], {self.step_graph.length: length + new}


def numpy_buffered_runtime(step: BufferedStep, output: str, weights: Mapping[str, np.ndarray]) -> BufferedRuntime:
    """The step in buffers on the interpreter: the contract's reference (the interpreter copies each buffer it
    writes, as a function does, and refuses a step past the buffers' end)."""
    from pseudoformer.ir.interpreter import run

    graph: Graph = step.graph
    buffers = CacheBuffers(step.slots, lambda shape, dtype: np.zeros(shape, dtype), lambda a: a)
    return BufferedRuntime(step, output, graph.inputs[0].attrs["name"], buffers,
                           lambda feed: run(graph, feed, weights))
