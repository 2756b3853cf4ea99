"""Running the derived graphs (encoder, prefill, decode step) on a backend, keeping the cache there.

A runtime answers three calls: encode(inputs) once for an encoder–decoder, prefill(tokens) for the
prompt, step(tokens, cache) per new token. The cache is opaque to the generation loop: numpy arrays
for the interpreter, onnxruntime OrtValues for ONNX (so the keys and values never go through numpy
between steps), TVM NDArrays for TVM.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from pseudoformer.base.errors import BackendError
from pseudoformer.generation.onnx_files import OnnxFiles, load_proto
from pseudoformer.generation.step_values import PAST_LENGTH, DeviceScores, StepValues
from pseudoformer.ir import Graph, TensorType
from pseudoformer.passes.kv_cache import IncrementalDecoder

if TYPE_CHECKING:
    from pseudoformer.backends.options import CompileOptions

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
    weights are loaded once. The step's tokens, scores (and the cache in buffers) are values on the
    provider's device made once per generation and bound once (step_values.py): per token only the new
    ids and the cache's length are written, and greedy decoding reads back only the ids.

    With contrib_ops, where every attention over the cache is one GroupQueryAttention takes, the cache
    lives in buffers allocated for all its positions (`reserve`), each bound as both a step's past input
    and its present output: the kernel appends the new keys and values in place, and a step writes only
    its tokens and the cache's length (PAST_LENGTH). With standard ONNX ops a step's present is a new
    value (Attention concatenates past and new), bound as the next step's past.

    With options.cuda_graph (and the cache in buffers) the step after the prompt runs on a session of its own,
    its sizes fixed to the generation's batch and capacity, which onnxruntime's CUDA provider captures as one
    CUDA graph and replays per token (step_values.py); the prompt runs on the first session. On the CPU the same
    two sessions run without a graph (what the CPU's tests check)."""

    def __init__(self, dec: IncrementalDecoder, output: str, weights: Mapping[str, np.ndarray],
                 options: CompileOptions | None = None, *, metadata: Mapping[str, str] | None = None,
                 release: Callable[[], None] | None = None) -> None:
        from pseudoformer.backends.onnx import OnnxRunner
        from pseudoformer.backends.onnx.compile import lower_model
        from pseudoformer.backends.options import CompileOptions

        options = options or CompileOptions()
        provider, threads, contrib_ops = options.provider, options.threads, options.contrib_ops
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
                                   fold_weights=True, refusals=refused, cuda_graph=options.cuda_graph)
                self.buffered = True
            except BackendError as e:  # some attention is not GroupQueryAttention's: a cache of values, as below
                if options.cuda_graph:
                    raise BackendError(f"CUDA graphs decode from a cache in buffers, which needs every attention "
                                       f"over the cache to be GroupQueryAttention's: {e}") from None
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
        decode = None
        if options.cuda_graph:
            def decode(sizes: Mapping[str, int]) -> OnnxRunner:
                return OnnxRunner(self.step_path, provider=provider, threads=threads, sizes=sizes,
                                  cuda_graph=provider == "cuda")
        self.values = StepValues(self.runner, dec, output, self.buffered, decode)

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
        """Make room for `positions` (prompt and new tokens) per row: the step's values, bound once (those of
        the last generation are kept when they fit)."""
        self.values.reserve(batch, positions)

    def prefill(self, feed: Mapping[str, Any]) -> tuple[DeviceScores, Cache]:
        tokens = np.asarray(feed[self.values.token_input])
        self.values.reserve_prompt(tokens.shape[0], tokens.shape[-1])  # and bound anew if the session was replaced
        self.values.bind_extras(feed)
        binding = self.values.prefill_binding(tokens)
        if self.buffered:
            self.values.write(None, 0)
            self.values.run(binding)
            return DeviceScores(self.values), {PAST_LENGTH: tokens.shape[-1]}
        empty = {k: self.ort.OrtValue.ortvalue_from_numpy(v, self.device)
                 for k, v in empty_cache(self.dec, feed).items()}
        return DeviceScores(self.values), _next_cache(self.dec, self.values.run(binding, empty))

    def step(self, feed: Mapping[str, Any], cache: Cache) -> tuple[DeviceScores, Cache]:
        values = self.values
        tokens = np.asarray(feed[values.token_input])
        values.bind_extras(feed)
        # one new token per row, the loop's case, goes through the token buffer and the binding made once
        one = tokens.shape == (values.batch, 1)
        binding = values.binding if one else values.prefill_binding(tokens)
        if not self.buffered:
            values.write(tokens if one else None, None)
            return DeviceScores(values), _next_cache(self.dec, values.run(binding, cache))
        past = int(cache[PAST_LENGTH])
        if values.decode is not None and not one and past:
            # the step for CUDA graphs gives its kernel the length of a prompt only where the cache is empty
            raise BackendError(f"with CUDA graphs a step after the prompt takes one token per row, not "
                               f"{tokens.shape[-1]} (past {past})")
        values.buffers.make_room(past, tokens.shape[-1])  # refused: the kernel would write past the buffers' end
        values.write(tokens if one else None, past)
        values.run(binding)
        return DeviceScores(values), {PAST_LENGTH: past + tokens.shape[-1]}


def empty_cache(dec: IncrementalDecoder, feed: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Past keys and values of no positions, for the batch of `feed`: the step graph then prefills."""
    batch = int(np.asarray(feed[dec.step.inputs[0].attrs["name"]]).shape[0])

    def empty(t: TensorType) -> np.ndarray:
        shape = [batch if d == "batch" else 0 if isinstance(d, str) else d for d in t.shape]
        return np.zeros(shape, dtype=t.dtype.value)

    return {name: empty(t) for s in dec.slots for name, t in ((s.past_key, s.key_type), (s.past_value, s.value_type))}
