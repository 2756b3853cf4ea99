"""The derived decoder on TVM: the step graph compiled once, prefilling from an empty cache.

TVM gets the step graph without the last-position slicing: the slice leaves matrix products with a
static single row, which the CPU matmul schedule (backends/tvm/schedule.py) pads by iterator and
does not handle; a decode step has one row anyway, and only prefill pays for the other positions.

The step is the one in buffers (passes/kv_buffers.py) wherever TVM's kernel takes every attention over the cache
(float32, heads as an axis, no mask operand): the cache is one key and one value buffer per attention, made for
a generation's positions (`reserve`, from the generator), which the kernel appends to in place
(backends/tvm/attention_kernel.py), so a token copies its new keys and values and nothing else; the loop's cache
is the length alone (generation/cache_buffers.py, which also grows the buffers should a step need more room).
Elsewhere the step concatenates: the cache is its TVM tensors, each token's present a new one (concat_kernel.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pseudoformer.base.errors import UsageError
from pseudoformer.generation.cache_buffers import BufferedRuntime, CacheBuffers
from pseudoformer.generation.runtimes import Cache, _next_cache, empty_cache
from pseudoformer.ir import Graph, Op
from pseudoformer.passes.kv_buffers import BufferedStep, CacheBufferError, buffered_step
from pseudoformer.passes.kv_cache import IncrementalDecoder


class TvmRuntime:
    """cache_buffers=False compiles the concatenating step even where the one in buffers could run: for a
    comparison of the two (benchmarks/tvm_cache_ab.py); a generation has no reason to ask for it."""

    def __init__(self, dec: IncrementalDecoder, output: str, weights: Mapping[str, np.ndarray], *,
                 threads: int | None = None, int8_activations: bool = False, cache_buffers: bool = True) -> None:
        from pseudoformer.base.errors import BackendError
        from pseudoformer.deploy_tvm import _build

        # threads: None, as CompileOptions.problems has it for tvm (TVM sizes its own pool)
        build = _build()
        self.dec, self.output = dec, output
        self._cache_outputs = frozenset(n for s in dec.slots for n in (s.present_key, s.present_value))
        self.buffered = _buffered(dec) if cache_buffers else None
        self.step_graph: Graph = self.buffered.graph if self.buffered is not None else dec.step
        try:
            self.step_model = build.compile_graph(self.step_graph, weights, int8_activations=int8_activations,
                                                  specialise=_one_token(dec))
            self.encoder_model = build.compile_graph(dec.encoder, weights) if dec.encoder is not None else None
            # the weights made now (lazy ones quantized a matrix at a time), not in the first prefill's time
            for m in (self.step_model, self.encoder_model):
                if m is not None:
                    m.load_weights()
        except BackendError as e:
            raise UsageError(str(e)) from None
        self._in_buffers: BufferedRuntime | None = None
        if self.buffered is not None:
            import tvm

            dev = tvm.cpu()
            buffers = CacheBuffers(self.buffered.slots, lambda shape, dtype: tvm.runtime.empty(shape, dtype, dev),
                                   np.from_dlpack)
            token = self.step_graph.inputs[0].attrs["name"]
            self._in_buffers = BufferedRuntime(self.buffered, output, token, buffers,
                                               lambda feed: self.step_model.run(feed, keep=self._cache_outputs))

    @property
    def buffers(self) -> CacheBuffers | None:
        """The cache's buffers, when the step is the one in buffers."""
        return self._in_buffers.buffers if self._in_buffers is not None else None

    def encode(self, inputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
        assert self.encoder_model is not None
        return self.encoder_model.run(dict(inputs))

    def reserve(self, batch: int, positions: int) -> None:
        """Room for `positions` (prompt and new tokens) per row: buffers made once per generation (kept when
        those held fit). Nothing to do for a step that concatenates."""
        if self._in_buffers is not None:
            self._in_buffers.reserve(batch, positions)

    def prefill(self, feed: Mapping[str, Any]) -> tuple[np.ndarray, Cache]:
        if self._in_buffers is not None:
            return self._in_buffers.prefill(feed)
        return self.step(feed, empty_cache(self.dec, feed))

    def step(self, feed: Mapping[str, Any], cache: Cache) -> tuple[np.ndarray, Cache]:
        if self._in_buffers is not None:
            return self._in_buffers.step(feed, cache)
        # the cache stays in TVM's tensors from step to step (numpy would copy it twice a token)
        out = self.step_model.run({**feed, **cache}, keep=self._cache_outputs)
        return out[self.output][:, -1:], _next_cache(self.dec, out)

    def step_inputs(self, feed: Mapping[str, Any], cache: Cache) -> dict[str, Any]:
        """Everything step_model takes for this step (tools that time the compiled step alone)."""
        if self._in_buffers is None:
            return {**feed, **cache}
        length = self._in_buffers.step_graph.length
        return {**feed, length: np.array(cache[length], dtype=np.int64), **self._in_buffers.buffers.values}


def _buffered(dec: IncrementalDecoder) -> BufferedStep | None:
    """The step in buffers, where TVM's kernel takes each of its attentions; else None (the step concatenates)."""
    from pseudoformer.backends.tvm.lowerings import accepts

    try:
        step = buffered_step(dec)
    except CacheBufferError:
        return None
    kernels = [n for n in step.graph.nodes() if n.op is Op.BUFFERED_ATTENTION]
    return step if all(accepts(n) for n in kernels) else None


def _one_token(dec: IncrementalDecoder) -> dict[str, int]:
    """The named dims of the step's token input (batch and new positions) at 1: one row's decode step, whose
    shapes are then constants but for the cache's length (build.compile_graph's specialise)."""
    tokens = next(n.type for n in dec.step.inputs if n.type.rank >= 2 and n.type.shape[1] == dec.positions)
    return {d: 1 for d in tokens.shape if isinstance(d, str)}
