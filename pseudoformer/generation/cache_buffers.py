"""The buffers of a step whose cache is in buffers (passes/kv_buffers.py), and the runtimes that run such a step.

CacheBuffers holds one buffer per past key and value, of a batch size and a capacity, and the one rule for their
room, which every runtime of a step in buffers follows (TVM's and the interpreter's here, onnxruntime's
GroupQueryAttention step through generation/step_values.py): `reserve` makes them for a generation (prompt + new
tokens, the last never fed back), keeping those held when they fit; `reserve_prompt` makes twice a prompt's length
where a runtime is called without a reserve; `make_room` grows them before a step that would run past their end,
to twice the capacity (or what the step needs), copying the positions held: a copy when the capacity doubles, not
each token. A buffer is whatever the backend keeps (a TVM tensor, a numpy array, an OrtValue); `allocate` and
`view` (numpy's view of it, for that copy) say how.

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
from pseudoformer.passes.kv_cache import PAST, CacheSlot

Cache = dict[str, Any]


class CacheBuffers:
    """`slots`' buffers. Their positions axis is CAPACITY in a BufferedStep's slots, PAST in the concatenating
    step's (whose past inputs onnxruntime's GroupQueryAttention step takes as buffers). `dtypes`: a buffer's dtype
    where it is not its slot type's (an ONNX session's float16 cache of a float32 graph). `view=None`: buffers that
    cannot be read on the host, which make_room then cannot grow. Without slots nothing is held but the batch:
    any number of positions fits."""

    def __init__(self, slots: tuple[CacheSlot, ...], allocate: Callable[[tuple[int, ...], str], Any],
                 view: Callable[[Any], np.ndarray] | None, dtypes: Mapping[str, Any] | None = None) -> None:
        self.slots, self.allocate, self.view = slots, allocate, view
        self.dtypes = dict(dtypes or {})
        self.batch = self.capacity = 0
        self.values: dict[str, Any] = {}  # past input name → its buffer

    def _types(self) -> list[tuple[str, Any]]:
        return [(name, t) for s in self.slots for name, t in ((s.past_key, s.key_type), (s.past_value, s.value_type))]

    def _made(self, batch: int, capacity: int) -> dict[str, Any]:
        made = {}
        for name, t in self._types():
            shape = tuple(batch if d == "batch" else capacity if d in (CAPACITY, PAST) else d for d in t.shape)
            if not all(isinstance(d, int) for d in shape):
                raise ValueError(f"the cache buffer {name} has a size known only at run time: {t}")
            made[name] = self.allocate(shape, self.dtypes.get(name, t.dtype.value))
        return made

    def fits(self, batch: int, positions: int) -> bool:
        """Whether the buffers held are of `batch` rows and have room for `positions`."""
        return batch == self.batch and (not self.slots or positions <= self.capacity)

    def reserve(self, batch: int, positions: int) -> bool:
        """Buffers of `positions` for `batch` rows; those held are kept when they fit. Whether they were made."""
        if positions < 1:
            raise ValueError(f"a cache needs room for at least one position, not {positions}")
        if self.fits(batch, positions):
            return False
        self.values = self._made(batch, positions)
        self.batch, self.capacity = batch, positions if self.slots else 0
        return True

    def reserve_prompt(self, batch: int, length: int) -> bool:
        """Room for a prompt of `length` when the generation reserved none (a runtime called directly): those held
        where they fit, else twice its length. Whether they were made."""
        return False if self.fits(batch, length) else self.reserve(batch, 2 * length)

    def clear(self) -> None:
        """Let the buffers go (the next generation makes its own)."""
        self.values, self.batch, self.capacity = {}, 0, 0

    def make_room(self, length: int, new: int) -> None:
        """Room for `new` positions after the `length` held: the buffers grown to twice their capacity (or to
        length + new) where they are too small, the held positions copied."""
        if length + new <= self.capacity:
            return
        if self.view is None:
            raise RuntimeError(f"the cache holds {self.capacity} positions; {length + new} were asked for")
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
        self.buffers.reserve_prompt(tokens.shape[0], tokens.shape[1])
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
