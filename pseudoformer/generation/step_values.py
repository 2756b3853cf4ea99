"""The decode step's values on the runtime's device, made once and bound once: what keeps a step's Python lean.

A decode step's session reads the new tokens (and, with the cache in buffers, the cache's length) and writes
the scores of the last position. StepValues holds those as OrtValues on the session's device ("cpu" or
"cuda", the provider's): a token buffer [batch, 1], a length buffer [1], a scores buffer [batch, 1, vocab],
and, where the cache lives in buffers, the cache buffers themselves. They are allocated when a generation
reserves its positions (kept for the next one when they fit) and bound to one IO binding of the step that
every token reuses. Per token, the loop then:

- writes the new ids into the token buffer and the length into its buffer (OrtValue.update_inplace: a copy
  to the device on CUDA, a few bytes);
- runs the session with the binding made once;
- for greedy decoding, runs ArgMax over the scores where they are (a two-node session on the same device,
  its input bound to the scores buffer and its output to the token buffer), and reads back only the ids.

So on CUDA the cache, the inputs and the scores stay on the device and only the sampled ids cross; on the CPU
the scores are read in place (OrtValue.numpy() is a view of a CPU buffer). The ArgMax is a session of its own,
not a node added to the step graph, so that the step's file is the derived step graph as lowered (the
contrib-graph record, tests/backends/contrib_graphs.py, holds it). Sampling other than greedy reads the
scores (DeviceScores as an array) and writes the drawn ids back.

With `decode` (generate --cuda-graph) the binding every token reuses is of a second session of the same step file,
its sizes fixed to the batch, one new token and the buffers' capacity (onnxruntime's free dimension overrides), made
with the buffers: its shapes then fold to constants, what GroupQueryAttention reads on the host is a constant
(lowerings/group_query_attention.py), and no value crosses between host and device within the step, which is what
onnxruntime's CUDA provider needs to capture the step as one CUDA graph at its first runs and replay it for every
token after. The graph reads the values bound when it was captured: the buffers and the binding are made once per
batch and capacity and only written in place, and the prompt runs on the first session (its shapes its own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from pseudoformer.base.errors import BackendError
from pseudoformer.generation.cache_buffers import CacheBuffers
from pseudoformer.ir import TensorType
from pseudoformer.passes.kv_cache import IncrementalDecoder

PAST_LENGTH = "past_sequence_length"  # the step's input of the cache's length, when the cache is in buffers


class DeviceScores:
    """A step's scores [batch, 1, vocab], left in the buffer the step wrote. `np.asarray` reads them (on the
    CPU a view of the buffer, valid until the next step; on CUDA a copy); `argmax()` computes the greedy ids
    on the device, into the next step's token buffer, and reads back only those."""

    def __init__(self, values: StepValues) -> None:
        self._values = values

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        scores = self._values.scores.numpy()
        return np.array(scores, dtype=dtype, copy=True) if copy else np.asarray(scores, dtype=dtype)

    def argmax(self) -> np.ndarray:
        """The id of the largest score per row (ties to the lowest id, as numpy's argmax), int64 [batch]."""
        return self._values.greedy()


class StepValues:
    """The token, length, scores (and cache) buffers of one step session, and its IO binding, made once per
    batch size and capacity. `cache_slots` names the (past, present, type) of each cache buffer; empty when
    the cache is ORT-allocated values rebound each step (standard ONNX ops: no in-place append there)."""

    def __init__(self, runner: Any, dec: IncrementalDecoder, output: str, buffered: bool,
                 decode: Callable[[Mapping[str, int]], Any] | None = None) -> None:
        """`decode`: a runner of the step with the named sizes fixed (CUDA graphs: the module's docstring)."""
        from pseudoformer.backends.onnx.runner import _NUMPY

        self.runner, self.dec, self.output, self.buffered = runner, dec, output, buffered
        self.decode = decode
        self.decoder: Any = None  # decode's runner for the buffers held
        self.ort, self.device = runner._ort, runner.device
        self.token_input = dec.step.inputs[0].attrs["name"]
        # dtypes as the session has them (a float16 lowering's scores and cache are float16, the IR's float32)
        self.dtypes = {a.name: _NUMPY[a.type] for a in (*runner.session.get_inputs(), *runner.session.get_outputs())}
        self.scores_shape = list(dict(dec.step.outputs)[output].type.shape)
        if not (self.scores_shape[:2] == ["batch", 1] and all(isinstance(d, int) for d in self.scores_shape[2:])):
            raise BackendError(f"a decode step's output is [batch, 1, …] after the last-position cut, not "
                               f"{self.scores_shape} (a generation bug)")
        self.presents = {n for s in dec.slots for n in (s.present_key, s.present_value)}
        # the cache's buffers and the rule for their room, shared with TVM's and the interpreter's steps in buffers
        # (bound in place, never grown: onnxruntime's GroupQueryAttention writes within them)
        self.buffers = CacheBuffers(dec.slots if buffered else (), self._value, None, self.dtypes)
        self.session: Any = None
        self.binding: Any = None
        self.cache: dict[str, Any] = {}
        self._argmax: Any = None
        self._argmax_binding: Any = None
        self._written: np.ndarray | None = None  # the ids the last argmax left in the token buffer
        self._extras: dict[str, Any] = {}
        if decode is not None:
            self._check_capturable()

    def _check_capturable(self) -> None:
        """A step a CUDA graph can replay: its cache in buffers, and nothing bound per generation (an encoder's
        values) or left for onnxruntime to allocate (an output other than the scores and the cache)."""
        if not self.buffered:
            raise BackendError("CUDA graphs need the cache in buffers that GroupQueryAttention appends to "
                               "(--contrib-ops, every attention over the cache GroupQueryAttention's)")
        inputs = set(self.runner.input_names) - {self.token_input, PAST_LENGTH, *(p for p, _, _ in self.cache_slots())}
        outputs = set(self.runner.output_names) - {self.output} - self.presents
        if inputs or outputs:
            raise BackendError(f"CUDA graphs replay a decoder-only step (tokens, length, cache → scores, cache); "
                               f"this one also has {', '.join(sorted(inputs | outputs))}")

    def _sizes(self) -> dict[str, int]:
        """The step's named dims fixed for the decode session: batch, one new token, the buffers' capacity."""
        shapes = {i.name: i.shape for i in self.runner.session.get_inputs()}
        fixed = {}
        past = self.cache_slots()[0][0]
        for dim, size in ((shapes[self.token_input][0], self.batch), (shapes[self.token_input][1], 1),
                          (shapes[past][2], self.capacity)):
            if isinstance(dim, str) and fixed.setdefault(dim, size) != size:
                raise BackendError(f"the step's dim {dim!r} is both {fixed[dim]} and {size} (a generation bug)")
        return fixed

    @property
    def batch(self) -> int:
        return self.buffers.batch

    @property
    def capacity(self) -> int:
        """The positions the cache's buffers hold (0 where the cache is not in buffers)."""
        return self.buffers.capacity

    # buffers and bindings -----------------------------------------------------------------------------------

    def _value(self, shape: Iterable[int], dtype: Any) -> Any:
        return self.ort.OrtValue.ortvalue_from_shape_and_type(list(shape), np.dtype(dtype), self.device)

    def reserve(self, batch: int, positions: int) -> None:
        """Room for `positions` per row (prompt and new tokens): buffers made unless those held fit (CacheBuffers'
        rule), and the step's binding made unless the one held is of this session, batch and capacity."""
        self._held(self.buffers.reserve(batch, positions))

    def reserve_prompt(self, batch: int, length: int) -> None:
        """reserve() for a prompt of `length` where the generation reserved none (CacheBuffers.reserve_prompt)."""
        self._held(self.buffers.reserve_prompt(batch, length))

    def _held(self, made: bool) -> None:
        """The token, length and scores buffers made with the cache's (`made`), and the step's binding made where
        they were or the session was replaced."""
        session = self.runner.session
        if not made and session is self.session:
            return
        if made:
            batch = self.buffers.batch
            self.tokens = self._value((batch, 1), self.dtypes[self.token_input])
            self.length = self._value((1,), np.int64)
            self.scores = self._value((batch, *self.scores_shape[1:]), self.dtypes[self.output])
            # each buffer is bound as both the past and the present of its slot
            self.cache = {}
            for past, present, _ in self.cache_slots():
                self.cache[past] = self.cache[present] = self.buffers.values[past]
            self._argmax = None
            if self.decode is not None:
                self.decoder = None  # the last one's session goes before the next is made
                self.decoder = self.decode(self._sizes())
        self.session = session
        self.binding = self._bind(self.tokens, self.decoder.session if self.decoder is not None else None)
        self._written = None

    def cache_slots(self) -> list[tuple[str, str, TensorType]]:
        if not self.buffered:
            return []
        return [(past, present, t) for s in self.dec.slots for past, present, t in
                ((s.past_key, s.present_key, s.key_type), (s.past_value, s.present_value, s.value_type))]

    def _bind(self, tokens: Any, session: Any = None) -> Any:
        """A binding of the step session (or `session`): `tokens` as its token input, the length, the scores buffer,
        the cache buffers as both past and present, the extra inputs (encoder values), other outputs to the
        device."""
        binding = (session or self.session).io_binding()
        binding.bind_ortvalue_input(self.token_input, tokens)
        if self.buffered:
            binding.bind_ortvalue_input(PAST_LENGTH, self.length)
        for name, value in self._extras.items():
            binding.bind_ortvalue_input(name, value)
        for name in self.runner.output_names:
            if name == self.output:
                binding.bind_ortvalue_output(name, self.scores)
            elif not (self.buffered and name in self.presents):  # a new present each step, ORT's, on the device
                binding.bind_output(name, self.device)
        for past, present, _ in self.cache_slots():
            binding.bind_ortvalue_input(past, self.cache[past])
            binding.bind_ortvalue_output(present, self.cache[present])
        return binding

    def bind_extras(self, feed: Mapping[str, Any]) -> None:
        """The inputs other than the tokens (an encoder's values, the same every step): bound once per
        generation; a later step binds one again only if it is another value."""
        for name, value in feed.items():
            if name == self.token_input or self._extras.get(name) is value:
                continue
            if not isinstance(value, self.ort.OrtValue):
                value = self.ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(value), self.device)
            self._extras[name] = value
            self.binding.bind_ortvalue_input(name, value)

    # the per-token calls ----------------------------------------------------------------------------------

    def prefill_binding(self, prompt: np.ndarray) -> Any:
        """The step's binding with the prompt as its tokens: made per generation (the prompt's shape is its own)."""
        return self._bind(self.ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(prompt), self.device))

    def run(self, binding: Any, cache: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Run the step on `binding`. With the cache in buffers nothing comes back but the scores' buffer,
        written in place; otherwise `cache` (ORT values) is bound as the past, each present is bound to a new
        ORT-allocated value, and the outputs are returned by name (they hold the next step's past)."""
        if self.buffered:
            # the binding of every token is the decode session's where there is one (CUDA graphs)
            decoder = self.decoder is not None and binding is self.binding
            (self.decoder.session if decoder else self.session).run_with_iobinding(binding)
            return {}
        for name, value in (cache or {}).items():
            binding.bind_ortvalue_input(name, value)
        for name in self.presents:  # rebound empty: ORT allocates it anew rather than writing over a past
            binding.bind_output(name, self.device)
        self.session.run_with_iobinding(binding)
        return dict(zip(self.runner.output_names, binding.get_outputs(), strict=True))

    def write(self, tokens: np.ndarray | None, past: int | None) -> None:
        """The step's new ids [batch, 1] and the cache's length into their buffers (None: not this one); ids the
        last argmax left there already are not written again."""
        if tokens is not None and (self._written is None or not np.array_equal(tokens, self._written)):
            self.tokens.update_inplace(np.ascontiguousarray(tokens, dtype=self.dtypes[self.token_input]))
        self._written = None
        if past is not None:
            self.length.update_inplace(np.array([past], dtype=np.int64))

    def greedy(self) -> np.ndarray:
        """ArgMax over the scores buffer on its device, into the token buffer; the ids read back [batch]."""
        if self._argmax is None:
            self._argmax = _argmax_runner(self.runner, self.dtypes[self.output], self.dtypes[self.token_input],
                                          [self.batch, *self.scores_shape[1:]])
            self._argmax_binding = self._argmax.session.io_binding()
            self._argmax_binding.bind_ortvalue_input("scores", self.scores)
            self._argmax_binding.bind_ortvalue_output("ids", self.tokens)
        self._argmax.session.run_with_iobinding(self._argmax_binding)
        ids = np.array(self.tokens.numpy())  # [batch, 1], a copy: the buffer is the next input
        self._written = ids
        return ids[:, 0]


def _argmax_runner(runner: Any, dtype: Any, ids_dtype: Any, shape: list[int]) -> Any:
    """A small session, ArgMax over the last axis of the scores (first maximum, as numpy's) cast to the token
    input's type (ONNX's ArgMax gives int64), on the step's provider, one thread."""
    from onnx import helper

    from pseudoformer.backends.onnx import OnnxRunner

    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    ids = helper.np_dtype_to_tensor_dtype(np.dtype(ids_dtype))
    graph = helper.make_graph(
        [helper.make_node("ArgMax", ["scores"], ["argmax"], axis=-1, keepdims=0),
         helper.make_node("Cast", ["argmax"], ["ids"], to=ids)], "greedy",
        [helper.make_tensor_value_info("scores", elem, shape)],
        [helper.make_tensor_value_info("ids", ids, shape[:-1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    return OnnxRunner(model, provider=runner.provider, threads=1)
