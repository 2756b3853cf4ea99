"""The derived decoder on TVM: the step graph compiled once, prefilling with an empty cache.

TVM gets the step graph without the last-position slicing: the slice leaves matrix products with a
static single row, which the CPU matmul schedule (backends/tvm/schedule.py) pads by iterator and
does not handle; a decode step has one row anyway, and only prefill pays for the other positions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pseudoformer.base.errors import UsageError
from pseudoformer.generation.runtimes import Cache, _next_cache, empty_cache
from pseudoformer.passes.kv_cache import IncrementalDecoder


class TvmRuntime:
    def __init__(self, dec: IncrementalDecoder, output: str, weights: Mapping[str, np.ndarray], *,
                 threads: int | None = None, int8_activations: bool = False) -> None:
        from pseudoformer.base.errors import BackendError
        from pseudoformer.deploy_tvm import _build

        # threads: None, as CompileOptions.problems has it for tvm (TVM sizes its own pool)
        build = _build()
        self.dec, self.output = dec, output
        self._cache_outputs = frozenset(n for s in dec.slots for n in (s.present_key, s.present_value))
        try:
            self.step_model = build.compile_graph(dec.step, weights, int8_activations=int8_activations,
                                                  specialise=_one_token(dec))
            self.encoder_model = build.compile_graph(dec.encoder, weights) if dec.encoder is not None else None
            # the weights made now (lazy ones quantized a matrix at a time), not in the first prefill's time
            for m in (self.step_model, self.encoder_model):
                if m is not None:
                    m.load_weights()
        except BackendError as e:
            raise UsageError(str(e)) from None

    def encode(self, inputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
        assert self.encoder_model is not None
        return self.encoder_model.run(dict(inputs))

    def prefill(self, feed: Mapping[str, Any]) -> tuple[np.ndarray, Cache]:
        return self.step(feed, empty_cache(self.dec, feed))

    def step(self, feed: Mapping[str, Any], cache: Cache) -> tuple[np.ndarray, Cache]:
        # the cache stays in TVM's tensors from step to step (numpy would copy it twice a token)
        out = self.step_model.run({**feed, **cache}, keep=self._cache_outputs)
        return out[self.output][:, -1:], _next_cache(self.dec, out)


def _one_token(dec: IncrementalDecoder) -> dict[str, int]:
    """The named dims of the step's token input (batch and new positions) at 1: one row's decode step, whose
    shapes are then constants but for the cache's length (build.compile_graph's specialise)."""
    tokens = next(n.type for n in dec.step.inputs if n.type.rank >= 2 and n.type.shape[1] == dec.positions)
    return {d: 1 for d in tokens.shape if isinstance(d, str)}
