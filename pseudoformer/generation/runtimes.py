"""Running the derived graphs (encoder, prefill, decode step) on a backend, keeping the cache there.

A runtime answers three calls: encode(inputs) once for an encoder–decoder, prefill(tokens) for the
prompt, step(tokens, cache) per new token. The cache is opaque to the generation loop: numpy arrays
for the interpreter, onnxruntime OrtValues for ONNX (so the keys and values never go through numpy
between steps), TVM NDArrays for TVM.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from pseudoformer.generation.onnx_files import OnnxFiles, load_proto
from pseudoformer.ir import Graph, TensorType
from pseudoformer.passes.kv_cache import IncrementalDecoder

Cache = dict[str, Any]  # past input name → value, as the backend keeps it


class Runtime(Protocol):
    def encode(self, inputs: Mapping[str, np.ndarray]) -> dict[str, Any]: ...
    def prefill(self, feed: Mapping[str, Any]) -> tuple[np.ndarray, Cache]: ...
    def step(self, feed: Mapping[str, Any], cache: Cache) -> tuple[np.ndarray, Cache]: ...


def _next_cache(dec: IncrementalDecoder, outputs: Mapping[str, Any]) -> Cache:
    cache = {}
    for s in dec.slots:
        cache[s.past_key] = outputs[s.present_key]
        cache[s.past_value] = outputs[s.present_value]
    return cache


class NumpyRuntime:
    """The reference: the IR interpreter on the prefill and step graphs."""

    def __init__(self, dec: IncrementalDecoder, output: str, weights: Mapping[str, np.ndarray]) -> None:
        self.dec, self.output, self.weights = dec, output, weights

    def _run(self, graph: Graph, feed: Mapping[str, Any]) -> dict[str, np.ndarray]:
        from pseudoformer.ir.interpreter import run

        return run(graph, feed, self.weights)

    def encode(self, inputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
        assert self.dec.encoder is not None
        return self._run(self.dec.encoder, inputs)

    def prefill(self, feed: Mapping[str, Any]) -> tuple[np.ndarray, Cache]:
        out = self._run(self.dec.prefill, feed)
        return out[self.output], _next_cache(self.dec, out)

    def step(self, feed: Mapping[str, Any], cache: Cache) -> tuple[np.ndarray, Cache]:
        out = self._run(self.dec.step, {**feed, **cache})
        return out[self.output], _next_cache(self.dec, out)


PAST_LENGTH = "past_sequence_length"  # the step's input of the cache's length, when the cache is in buffers


class OnnxRuntime:
    """onnxruntime sessions; the step graph also prefills (with an empty cache), so the decoder's
    weights are loaded once. Outputs are bound to ORT-allocated values and fed back as they are.

    With contrib_ops, where every attention over the cache is one GroupQueryAttention takes, the cache
    lives in buffers allocated once per generation (`reserve`) for all its positions, each bound as
    both a step's past input and its present output: the kernel appends the new keys and values in
    place, and a step binds only its tokens and the cache's length (PAST_LENGTH)."""

    def __init__(self, dec: IncrementalDecoder, output: str, weights: Mapping[str, np.ndarray], *,
                 provider: str = "cpu", threads: int | None = None, metadata: Mapping[str, str] | None = None,
                 contrib_ops: bool = False, release: Callable[[], None] | None = None) -> None:
        from pseudoformer.backends.onnx import OnnxRunner
        from pseudoformer.backends.onnx.compile import lower_model
        from pseudoformer.base.errors import BackendError

        self.dec, self.output = dec, output
        self.buffered = False
        # Each graph is written to a file with its weights outside (onnx_files.py), and the sessions
        # are made from the files: no protobuf of the weights, no 2 GiB limit, and `release` lets the
        # caller drop its arrays before onnxruntime takes its own copy.
        self.files = OnnxFiles()
        if contrib_ops:
            from pseudoformer.deploy import say_contrib_fallback

            refused: list = []
            try:
                step = lower_model(dec.step, weights, metadata=metadata, contrib_ops=True, kv_buffers=PAST_LENGTH,
                                   fold_weights=True, refusals=refused)
                self.buffered = True
            except BackendError:  # some attention is not GroupQueryAttention's: a cache of values, as below
                refused.clear()
                step = lower_model(dec.step, weights, metadata=metadata, contrib_ops=True, fold_weights=True,
                                   refusals=refused)
            say_contrib_fallback(refused)  # as compile does: once, how many attentions stay standard, and why
        else:
            step = lower_model(dec.step, weights, metadata=metadata, fold_weights=True)
        self.step_path = self.files.write("step", step)
        del step
        self.encoder_path = (self.files.write("encoder", lower_model(dec.encoder, weights, metadata=metadata,
                                                                      contrib_ops=contrib_ops, fold_weights=True))
                             if dec.encoder is not None else None)
        if release is not None:
            release()
        self.runner = OnnxRunner(self.step_path, provider=provider, threads=threads)
        self.encoder = (OnnxRunner(self.encoder_path, provider=provider, threads=threads)
                        if self.encoder_path is not None else None)
        self.ort = self.runner._ort
        self.device = self.runner.device
        self._binding: Any = None
        self._capacity = self._output_index = 0
        self._output_buffer: Any = None

    @functools.cached_property
    def step_model(self) -> Any:
        """The step graph as one onnx.ModelProto, read back from its file (for tests and tools)."""
        return load_proto(self.step_path)

    @functools.cached_property
    def encoder_model(self) -> Any:
        return load_proto(self.encoder_path) if self.encoder_path is not None else None

    def encode(self, inputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
        assert self.encoder is not None
        values = self.encoder.run(inputs)
        return {k: self.ort.OrtValue.ortvalue_from_numpy(v, self.device) for k, v in values.items()}

    def reserve(self, batch: int, positions: int) -> None:
        """Make room for `positions` (prompt and new tokens) per row: the cache buffers, bound once."""
        if not self.buffered:
            return
        binding = self.runner.session.io_binding()
        presents = {name for s in self.dec.slots for name in (s.present_key, s.present_value)}
        # The output of a step has a fixed shape ([batch, 1, vocabulary] after the last-position cut):
        # bound to a buffer of its own, it is read without get_outputs() wrapping every cache buffer.
        result = dict(self.dec.step.outputs)[self.output]
        shape = [batch if d == "batch" else d for d in result.type.shape]
        self._output_buffer = None
        if all(isinstance(d, int) for d in shape):
            self._output_buffer = self.ort.OrtValue.ortvalue_from_shape_and_type(
                shape, np.dtype(result.dtype.value), self.device)
        # get_outputs() lists the outputs in the order they were bound: the model's own ones first
        own = [name for name in self.runner.output_names if name not in presents]
        self._output_index = own.index(self.output)
        for name in own:
            if name == self.output and self._output_buffer is not None:
                binding.bind_ortvalue_output(name, self._output_buffer)
            else:
                binding.bind_output(name, self.device)
        for s in self.dec.slots:
            for past, present, t in ((s.past_key, s.present_key, s.key_type),
                                     (s.past_value, s.present_value, s.value_type)):
                shape = [batch if d == "batch" else positions if isinstance(d, str) else d for d in t.shape]
                buffer = self.ort.OrtValue.ortvalue_from_shape_and_type(shape, np.dtype(t.dtype.value), self.device)
                binding.bind_ortvalue_input(past, buffer)
                binding.bind_ortvalue_output(present, buffer)
        self._binding, self._capacity = binding, positions

    def prefill(self, feed: Mapping[str, Any]) -> tuple[np.ndarray, Cache]:
        if self.buffered:
            if self._binding is None:
                tokens = np.asarray(feed[self.dec.step.inputs[0].attrs["name"]])
                self.reserve(tokens.shape[0], 2 * tokens.shape[-1])  # no reserve: the prompt's length again
            return self.step(feed, {PAST_LENGTH: 0})
        empty = empty_cache(self.dec, feed)
        return self.step(feed, {k: self.ort.OrtValue.ortvalue_from_numpy(v, self.device) for k, v in empty.items()})

    def step(self, feed: Mapping[str, Any], cache: Cache) -> tuple[np.ndarray, Cache]:
        if self.buffered:
            return self._buffered_step(feed, cache)
        session = self.runner.session
        binding = session.io_binding()
        for name, value in feed.items():
            if isinstance(value, self.ort.OrtValue):
                binding.bind_ortvalue_input(name, value)
            else:
                binding.bind_cpu_input(name, np.ascontiguousarray(value))
        for name, value in cache.items():
            binding.bind_ortvalue_input(name, value)
        names = self.runner.output_names
        for name in names:
            binding.bind_output(name, self.device)
        session.run_with_iobinding(binding)
        values = dict(zip(names, binding.get_outputs(), strict=True))
        return values[self.output].numpy(), _next_cache(self.dec, values)

    def _buffered_step(self, feed: Mapping[str, Any], cache: Cache) -> tuple[np.ndarray, Cache]:
        past = int(cache[PAST_LENGTH])
        binding = self._binding
        new = 0
        for name, value in feed.items():
            if isinstance(value, self.ort.OrtValue):
                binding.bind_ortvalue_input(name, value)
            else:
                value = np.ascontiguousarray(value)
                binding.bind_cpu_input(name, value)
                new = max(new, value.shape[-1]) if name == self.dec.step.inputs[0].attrs["name"] else new
        if past + new > self._capacity:  # the kernel would write past the buffers' end
            raise RuntimeError(f"the cache holds {self._capacity} positions; {past + new} were asked for")
        binding.bind_cpu_input(PAST_LENGTH, np.array([past], dtype=np.int64))
        self.runner.session.run_with_iobinding(binding)
        out = self._output_buffer or binding.get_outputs()[self._output_index]
        return out.numpy(), {PAST_LENGTH: past + new}


def empty_cache(dec: IncrementalDecoder, feed: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Past keys and values of no positions, for the batch of `feed`: the step graph then prefills."""
    batch = int(np.asarray(feed[dec.step.inputs[0].attrs["name"]]).shape[0])

    def empty(t: TensorType) -> np.ndarray:
        shape = [batch if d == "batch" else 0 if isinstance(d, str) else d for d in t.shape]
        return np.zeros(shape, dtype=t.dtype.value)

    return {name: empty(t) for s in dec.slots for name, t in ((s.past_key, s.key_type), (s.past_value, s.value_type))}
