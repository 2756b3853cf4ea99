"""Running the derived graphs (encoder, prefill, decode step) on a backend, keeping the cache there.

A runtime answers three calls: encode(inputs) once for an encoder–decoder, prefill(tokens) for the
prompt, step(tokens, cache) per new token. The cache is opaque to the generation loop: numpy arrays
for the interpreter, onnxruntime OrtValues for ONNX (so the keys and values never go through numpy
between steps), TVM NDArrays for TVM.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

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


class OnnxRuntime:
    """onnxruntime sessions; the step graph also prefills (with an empty cache), so the decoder's
    weights are loaded once. Outputs are bound to ORT-allocated values and fed back as they are."""

    def __init__(self, dec: IncrementalDecoder, output: str, weights: Mapping[str, np.ndarray], *,
                 provider: str = "cpu", threads: int | None = None, metadata: Mapping[str, str] | None = None) -> None:
        from pseudoformer.backends.onnx import OnnxRunner, to_onnx

        self.dec, self.output = dec, output
        self.step_model = to_onnx(dec.step, weights, metadata=metadata)
        self.runner = OnnxRunner(self.step_model, provider=provider, threads=threads)
        self.encoder_model = to_onnx(dec.encoder, weights, metadata=metadata) if dec.encoder is not None else None
        self.encoder = (OnnxRunner(self.encoder_model, provider=provider, threads=threads)
                        if self.encoder_model is not None else None)
        self.ort = self.runner._ort
        self.device = self.runner.device

    def encode(self, inputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
        assert self.encoder is not None
        values = self.encoder.run(inputs)
        return {k: self.ort.OrtValue.ortvalue_from_numpy(v, self.device) for k, v in values.items()}

    def prefill(self, feed: Mapping[str, Any]) -> tuple[np.ndarray, Cache]:
        empty = empty_cache(self.dec, feed)
        return self.step(feed, {k: self.ort.OrtValue.ortvalue_from_numpy(v, self.device) for k, v in empty.items()})

    def step(self, feed: Mapping[str, Any], cache: Cache) -> tuple[np.ndarray, Cache]:
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


def empty_cache(dec: IncrementalDecoder, feed: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Past keys and values of no positions, for the batch of `feed`: the step graph then prefills."""
    batch = int(np.asarray(feed[dec.step.inputs[0].attrs["name"]]).shape[0])

    def empty(t: TensorType) -> np.ndarray:
        shape = [batch if d == "batch" else 0 if isinstance(d, str) else d for d in t.shape]
        return np.zeros(shape, dtype=t.dtype.value)

    return {name: empty(t) for s in dec.slots for name, t in ((s.past_key, s.key_type), (s.past_value, s.value_type))}
