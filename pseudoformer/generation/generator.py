"""The generation loop of Algorithms 14 and 15, run over a cached decoder the compiler derived.

    Algorithm 14 (DInference)                       here
    for i = 1, 2, …, ℓ_gen do                       prefill(x) once, then step(y) per token:
      P ← DTransformer(x | θ̂)                       only the new position's column is computed,
      p ← P[:, ℓ + i − 1]                           the earlier keys and values come from the cache
      sample a token y from q ∝ p^{1/τ}             sampling.sample
      x ← [x, y]                                    the cache grows by one position

`cache=False` runs the algorithm literally instead (the whole sequence through the model every
step), which is what the cached decoder is checked against.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from pseudoformer.base.errors import UsageError
from pseudoformer.generation.precision import half_decoder, half_weights
from pseudoformer.generation.runtimes import Cache, NumpyRuntime, OnnxRuntime, Runtime
from pseudoformer.generation.sampling import Sampling, log_probabilities, sample
from pseudoformer.generation.step_values import DeviceScores
from pseudoformer.inputs import check_input, size_limit, token_bounds
from pseudoformer.ir import Graph
from pseudoformer.model import Model
from pseudoformer.passes.generation_passes import incremental
from pseudoformer.passes.kv_cache import IncrementalDecoder
from pseudoformer.passes.manager import PassContext, named_pipeline, run_passes
from pseudoformer.run_settings import check_seed

if TYPE_CHECKING:
    from pseudoformer.backends.options import CompileOptions


@dataclass
class Generation:
    """Per row of the batch: the tokens generated (an end token included, then nothing after it)."""

    tokens: list[list[int]]
    scores: list[np.ndarray] = field(default_factory=list)  # the model's output column, per step [batch, vocab]
    # seconds of the prefill and of every later step, each with the choice of the token it scored
    prefill_seconds: float = 0.0
    step_seconds: list[float] = field(default_factory=list)


class Generator:
    """A decoder model made ready to generate: graphs derived, optimised, lowered to `backend`.

    contrib_ops (ONNX): onnxruntime's GroupQueryAttention and Skip(Simplified)LayerNormalization where
    they compute the same, and the cache in buffers the attention appends to where every attention
    over it is the kernel's (generation/runtimes.py); the tokens are the standard decoder's.

    keep_weights=False (ONNX): the model's weight arrays are released (`model.weights` emptied) once
    onnxruntime's files are written and before its sessions load them, so that the weights are held
    once, by onnxruntime, and not twice; for a caller that made the model only to generate with it."""

    def __init__(self, model: Model, *, decoder_input: str = "x", encoder_input: str | None = None,
                 output: str | None = None, model_output: str = "logits", cache: bool = True,
                 keep_weights: bool = True, options: CompileOptions | None = None, **keywords: Any) -> None:
        """`options` (a CompileOptions, at -O2 by default) or keywords naming its fields: backend ("onnx",
        "numpy", "tvm"), opt_level, threads, provider, quantize ("int4", "int8" or a QuantizeOptions, as
        everywhere), contrib_ops, int8_activations (tvm)."""
        from pseudoformer.backends.pipeline import model_passes, run
        from pseudoformer.compile_options import from_keywords

        self._bounds: dict[str, int] | None = None
        from pseudoformer.deploy import streams_weights
        from pseudoformer.optimize import debugging

        self.options = options = from_keywords(options, keywords, "generate", opt_level=2).runnable("generate")
        backend, opt_level = options.backend, options.opt_level
        if cache and opt_level < 2:
            raise UsageError(f"the key/value cache is derived from fused attention, which -O{opt_level} does not "
                             "make: generate at -O2, or without the cache")
        if options.cuda_graph and not cache:
            raise UsageError("--cuda-graph replays the decode step over the key/value cache: generate with the cache")
        names = [n for n, _ in model.graph.outputs]
        self.output = output or names[0]
        if self.output not in names:
            raise UsageError(f"{model.entry} has no output {self.output!r} (it has {', '.join(names)})")
        self.model, self.decoder_input, self.encoder_input = model, decoder_input, encoder_input
        self.model_output, self.cache = model_output, cache
        # The model's passes of a compile (backends/pipeline.py): the level's, then quantization, before
        # the decoder is derived, so that prefill, step and uncached runs read the same weights. For ONNX
        # each matrix is quantized as its file is written (runtimes.OnnxRuntime, lazy_weights); for TVM as
        # the tensors its kernels take are made, one at a time (backends/tvm/weight_values.py).
        passes = replace(options, lazy_weights=streams_weights(options))
        graph, self.weights = run(model.graph, model_passes(passes), weights=model.weights, options=passes,
                                  check=debugging())
        seq = graph.input(decoder_input).shape[1]
        self.positions = seq
        # The model's positions, or --max-seq-len for a model without a position table (inputs.size_limit):
        # prompt + max_new_tokens is bounded before anything is allocated for them.
        self.max_positions, self.positions_why = size_limit(model.graph, seq) if isinstance(seq, str) else (None, "")
        # A model without a position table still has the context its checkpoint was trained for (config.json's
        # max_position_embeddings, as ell_max): past it, RoPE's frequencies were never seen, and HF refuses too.
        context = model.config.hyperparameters.get("ell_max")
        if self.max_positions is not None and isinstance(context, int) and 0 < context < self.max_positions:
            self.max_positions = context
            self.positions_why = f"the context of its checkpoint, ell_max = max_position_embeddings = {context:,}"
        # The generation pipelines of the pass manager (passes/manager.py): the incremental decoder's
        # prefill and step graphs, each cut to the last position and cleaned up.
        ctx = PassContext(decoder_input=decoder_input, output=self.output, positions=seq)
        if cache:
            dec = incremental(graph, ctx)
            encoder = None if dec.encoder is None else run_passes(graph, named_pipeline("generation-encoder"), ctx=ctx)
            if backend != "tvm":  # see tvm_runtime.py
                dec = IncrementalDecoder(
                    prefill=run_passes(graph, named_pipeline("generation-prefill"), ctx=ctx),
                    step=run_passes(graph, named_pipeline("generation-step"), ctx=ctx),
                    encoder=encoder, slots=dec.slots, positions=seq)
            else:
                dec = IncrementalDecoder(prefill=dec.prefill, step=dec.step, encoder=encoder, slots=dec.slots,
                                         positions=seq)
            if options.dtype == "float16":  # the cached decoder in fp16, its cache too (uncached: the backend's pass)
                dec = half_decoder(dec)
                half_weights((dec.prefill, dec.step, dec.encoder), self.weights)
            self.decoder: IncrementalDecoder | None = dec
            self.runtime: Runtime = _runtime(dec, self.output, model, self.weights, options,
                                             self._release if not keep_weights else None)
        else:
            self.decoder = None
            full = run_passes(graph, named_pipeline("generation-uncached"), ctx=ctx)
            self.runtime = _FullRuntime(full, self.output, self.weights, decoder_input, options,
                                        self._release if not keep_weights else None)

    def _release(self) -> None:
        """Drop the weight arrays (the runtime has written what it needs): the model's and the passes' (a dict
        of their own, which the runtime was given: emptied, not merely replaced)."""
        self.model.weights.clear()
        self.weights.clear()

    def generate(self, prompt: Any, *, max_new_tokens: int, sampling: Sampling | None = None, seed: int | None = None,
                 eos_token: int | None = None, encoder_inputs: Mapping[str, Any] | None = None,
                 progress: Callable[[int], None] | None = None, keep_scores: bool = False) -> Generation:
        """Generate up to `max_new_tokens` after `prompt` (token ids [ℓ] or [batch, ℓ])."""
        sampling = sampling or Sampling()
        check_seed(seed)
        x = _ids(prompt, "the prompt")
        if x.ndim == 1:
            x = x[None, :]
        if x.ndim != 2 or x.shape[1] == 0:
            raise UsageError(f"the prompt must be a non-empty list of token ids (or one per row), got shape {x.shape}")
        if max_new_tokens < 1:
            raise UsageError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        if self.max_positions is not None and x.shape[1] + max_new_tokens - 1 > self.max_positions:
            raise UsageError(f"a prompt of {x.shape[1]:,} tokens and {max_new_tokens:,} new ones need "
                             f"{x.shape[1] + max_new_tokens - 1:,} positions; the model takes at most {self.max_positions:,} "
                             f"({self.positions_why})")
        self._check_ids(self.decoder_input, x)
        if eos_token is not None:  # an id no token has never ends a row: generation would run on silently
            vocabulary = self._token_bounds().get(self.decoder_input)
            if isinstance(eos_token, bool) or not isinstance(eos_token, int | np.integer) or eos_token < 0 or (
                    vocabulary is not None and eos_token >= vocabulary):
                ids = f"0 to {vocabulary - 1:,}" if vocabulary is not None else "whole numbers ≥ 0"
                raise UsageError(f"the end token {eos_token!r} is no token id of this model: its ids are {ids}")
        rng = np.random.default_rng(seed)
        enc = self._encode(encoder_inputs)
        result = Generation(tokens=[[] for _ in range(x.shape[0])])
        finished = np.zeros(x.shape[0], dtype=bool)
        reserve = getattr(self.runtime, "reserve", None)
        if reserve is not None:  # values made once per generation: room for every position it feeds
            reserve(x.shape[0], x.shape[1] + max_new_tokens - 1)
        # greedy ids computed where the scores are (ONNX: on the provider's device), only they read back
        on_device = sampling.greedy and not keep_scores
        start = time.perf_counter()
        scores, cache = self.runtime.prefill({self.decoder_input: x, **enc})
        for i in range(max_new_tokens):
            if on_device and isinstance(scores, DeviceScores):
                y = scores.argmax()
            else:
                column = np.asarray(scores)[:, -1]
                if keep_scores:
                    result.scores.append(column.copy())
                y = sample(log_probabilities(column, self.model_output), sampling, rng)
            # a token's time: the run that scored it and its choice (as genai's generate_next_token)
            if i:
                result.step_seconds.append(time.perf_counter() - start)
            else:
                result.prefill_seconds = time.perf_counter() - start
            for row in np.flatnonzero(~finished):
                result.tokens[row].append(int(y[row]))
            if eos_token is not None:
                finished |= y == eos_token
            if progress is not None:
                progress(i + 1)
            if finished.all() or i == max_new_tokens - 1:
                break
            start = time.perf_counter()
            scores, cache = self.runtime.step({self.decoder_input: y[:, None], **enc}, cache)
        return result

    def _encode(self, encoder_inputs: Mapping[str, Any] | None) -> dict[str, Any]:
        others = [n.attrs["name"] for n in self.model.graph.inputs if n.attrs["name"] != self.decoder_input]
        given = dict(encoder_inputs or {})
        if sorted(given) != sorted(others):
            want = ", ".join(others) or "none"
            raise UsageError(f"{self.model.entry} needs encoder inputs {want}; got {', '.join(given) or 'none'}")
        if not others:
            return {}
        feed = {k: _ids(v, k) for k, v in given.items()}
        feed = {k: v.reshape(1, -1) if v.ndim == 1 else v for k, v in feed.items()}
        for k, v in feed.items():
            self._check_ids(k, v)
        return self.runtime.encode(feed)

    def _check_ids(self, name: str, ids: np.ndarray) -> None:
        """Token ids index embedding tables, and a sequence is at most as long as the model's positions:
        a mistake in either is the user's, said before running."""
        graph = self.model.graph
        check_input(graph, graph.input(name), ids, self._token_bounds().get(name))

    def _token_bounds(self) -> dict[str, int]:
        """The model's token bounds, found once: a walk of a 30-layer graph is a quarter of a second, which every
        generate call paid before its prefill."""
        if self._bounds is None:
            self._bounds = token_bounds(self.model.graph)
        return self._bounds


def _ids(value: Any, what: str) -> np.ndarray:
    try:
        return np.asarray(value, dtype=np.int64)
    except (OverflowError, ValueError, TypeError):
        raise UsageError(f"{what} must be token ids: whole numbers below 2^63, one list per row") from None


def _runtime(dec: IncrementalDecoder, output: str, model: Model, weights: Mapping[str, np.ndarray],
             options: CompileOptions, release: Callable[[], None] | None) -> Runtime:
    if options.backend == "numpy":
        return NumpyRuntime(dec, output, weights)
    if options.backend == "onnx":
        from pseudoformer.model import model_metadata

        return OnnxRuntime(dec, output, weights, options, metadata=model_metadata(model, 2), release=release)
    from pseudoformer.generation.tvm_runtime import TvmRuntime

    return TvmRuntime(dec, output, weights, threads=options.threads,  # dec.step unsliced
                      int8_activations=options.int8_activations)


class _FullRuntime:
    """Algorithm 14 as written: every step runs the model on the whole sequence so far."""

    def __init__(self, graph: Graph, output: str, weights: Mapping[str, np.ndarray], decoder_input: str,
                 options: CompileOptions, release: Callable[[], None] | None = None) -> None:
        backend = options.backend
        self.graph, self.output, self.weights, self.x = graph, output, weights, decoder_input
        self.encoder_values: dict[str, Any] = {}
        if backend == "onnx":
            from pseudoformer.backends.onnx import OnnxRunner
            from pseudoformer.backends.onnx.compile import lower_model
            from pseudoformer.generation.onnx_files import OnnxFiles

            self.files = OnnxFiles()  # a session from a file, as OnnxRuntime's
            path = self.files.write("full", lower_model(graph, weights, options.for_derived(), fold_weights=True))
            if release is not None:
                release()
                self.weights = {}
            self.runner: Any = OnnxRunner(path, provider=options.provider, threads=options.threads)
        elif backend == "numpy":
            self.runner = None
        else:
            raise UsageError("uncached generation runs on the onnx or numpy backend")

    def _run(self, feed: Mapping[str, Any]) -> np.ndarray:
        if self.runner is None:
            from pseudoformer.ir.interpreter import run

            return run(self.graph, feed, self.weights)[self.output]
        return self.runner.run(feed)[self.output]

    def encode(self, inputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
        self.encoder_values = dict(inputs)  # the full graph reads the encoder inputs themselves
        return {}

    def prefill(self, feed: Mapping[str, Any]) -> tuple[np.ndarray, Cache]:
        seq = np.asarray(feed[self.x])
        return self._run({**self.encoder_values, self.x: seq}), {"seq": seq}

    def step(self, feed: Mapping[str, Any], cache: Cache) -> tuple[np.ndarray, Cache]:
        seq = np.concatenate([cache["seq"], np.asarray(feed[self.x])], axis=1)
        return self._run({**self.encoder_values, self.x: seq}), {"seq": seq}
