"""Generating in float16: the derived decoder's graphs computing in half precision, the cache held in it.

A compile's float16 pass (passes/float16.py) keeps a model's float inputs in fp32 and casts them where they
are used, and writes every float output in fp16. A decode step's float inputs are its own outputs fed
back (the past keys and values; an encoder–decoder's encoder values): they become fp16 too, so the cache
is fp16 end to end, half the memory and bandwidth of fp32, as onnxruntime-genai's fp16 folders keep it.
The weight arrays are converted as the compile's float16 pass converts them (passes/backend_prep.py): a
lazy one when it is loaded. Sampling reads the fp16 scores in float64 (sampling.log_probabilities).
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from dataclasses import replace
from typing import Any

from pseudoformer.ir import DType, Graph, TensorType
from pseudoformer.passes.float16 import to_float16
from pseudoformer.passes.kv_cache import IncrementalDecoder


def half(graph: Graph) -> Graph:
    """`graph` in float16, its float inputs included."""
    return to_float16(graph, float_inputs=True)[0]


def half_weights(graphs: Iterable[Graph | None], weights: MutableMapping[str, Any]) -> None:
    """Convert, in place, the arrays of the PARAMs that `graphs` read in float16: the dict is the one the
    runtime is given (and releases), so it is updated rather than replaced."""
    f16 = {p.attrs["name"] for g in graphs if g is not None for p in g.params() if p.dtype is DType.float16}
    for name in f16 & set(weights):
        if weights[name].dtype != DType.float16.value:
            weights[name] = weights[name].astype(DType.float16.value)


def half_decoder(dec: IncrementalDecoder) -> IncrementalDecoder:
    """The decoder's graphs in float16, and its cache slots typed so (the runtimes allocate buffers by them)."""

    def f16(t: TensorType) -> TensorType:
        return TensorType(DType.float16, t.shape) if t.dtype is DType.float32 else t

    slots = tuple(replace(s, key_type=f16(s.key_type), value_type=f16(s.value_type)) for s in dec.slots)
    return replace(dec, prefill=half(dec.prefill), step=half(dec.step), slots=slots,
                   encoder=None if dec.encoder is None else half(dec.encoder))
