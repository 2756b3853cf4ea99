"""Compile an IR graph to ONNX: its pipeline of passes (backends/pipeline.py), run once, then the lowering
(lower.py).

    to_onnx(graph, weights, dtype="float16", contrib_ops=True)       → onnx.ModelProto, weights inline
    lower_model(graph, weights, dtype="float16", contrib_ops=True)   → LoweredModel (graph and arrays apart)

Both take a backends/options.CompileOptions, or its fields as keywords. With opt_level
0 (to_onnx's default) the graph is taken as already optimised (a derived decoder's graph), and only
the backend's passes run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx

from pseudoformer.backends.onnx.lower import LoweredModel, check_names, checked_opset, lower_prepared
from pseudoformer.backends.onnx.lowerings import accepts
from pseudoformer.backends.options import CompileOptions
from pseudoformer.backends.pipeline import compile_pipeline, run
from pseudoformer.base.errors import BackendError
from pseudoformer.ir.graph import Graph
from pseudoformer.passes.contrib_ops import CacheBufferError, buffered_cache_dim
from pseudoformer.passes.pass_base import Pass


def pipeline(options: CompileOptions) -> list[str]:
    """The passes an ONNX compile with these options runs."""
    return compile_pipeline(options, "onnx", checked_opset(options))


def prepare(graph: Graph, weights: Mapping[str, np.ndarray], options: CompileOptions, *, check: bool = False,
            after: Callable[[Pass, Graph, bool], None] | None = None, refusals: list | None = None,
            fired: Counter[str] | None = None) -> tuple[Graph, dict[str, np.ndarray]]:
    """`graph` as this backend lowers it, and its weights then: the compile's pipeline of passes. `check`
    verifies the IR after every pass, `after` sees each pass's graph, `refusals` collects the fusions' and
    `fired` counts how often each rule rewrote."""
    opset = checked_opset(options)
    return run(graph, pipeline(options), weights=weights, options=options, accepts=lambda n: accepts(n, opset),
               check=check, after=after, refusals=refusals, fired=fired)


def lower_model(graph: Graph, weights: Mapping[str, np.ndarray], options: CompileOptions | None = None, *,
                verify: bool = False, refusals: list | None = None, **fields: Any) -> LoweredModel:
    """to_onnx's model as a LoweredModel: the ModelProto without initializers, and the weights, which
    save_model writes without ever holding them in a protobuf. `verify` checks the IR after every pass;
    `refusals` collects the fusions' (rule, reason, span, scope)."""
    options = (options or CompileOptions()).with_fields(fields)
    checked_opset(options)
    check_names(graph)
    graph, weights = prepare(graph, weights, options, check=verify, refusals=refusals)
    if options.fold_weights:
        from pseudoformer.passes.fold_constants import fold_constants

        graph, weights = fold_constants(graph, weights, lazy=True)
    sizes = {}
    if options.kv_buffers is not None:
        try:
            sizes[buffered_cache_dim(graph)] = options.kv_buffers
        except CacheBufferError as e:
            raise BackendError(str(e)) from None
    return lower_prepared(graph, weights, options, sizes)


def to_onnx(graph: Graph, params: Mapping[str, np.ndarray], options: CompileOptions | None = None,
            **fields: Any) -> onnx.ModelProto:
    """Lower `graph` with weights `params` (keyed by PARAM name) to one ONNX model, weights inline.

    `fields` set CompileOptions' fields (opset, dtype, contrib_ops, functions, metadata, kv_buffers, …).
    With dtype="float16" the weights are stored in fp16 and the model computes in fp16, except
    reductions, softmaxes and the values only they use, which compute in fp32 (passes/float16.py);
    inputs keep their declared types, float outputs are float16. With contrib_ops=True, onnxruntime's
    com.microsoft kernels replace standard ops where they compute the same and were measured faster
    (GroupQueryAttention, Skip(Simplified)LayerNormalization); the model then runs on onnxruntime only.
    """
    return lower_model(graph, params, options, **fields).to_proto()
