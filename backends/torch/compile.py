"""Compile an IR graph to a torch.nn.Module: its pipeline of passes (backends/pipeline.py), run once, then the
lowering (lower.py).

    to_torch(graph, weights)                        → torch.fx.GraphModule, forward(**inputs) → {name: tensor}
    to_torch(graph, weights, dtype="float16")       → the same in float16 (reductions and softmaxes in float32)
    to_torch_autocast(graph, weights)               → float32, for a forward under torch.autocast (training's
                                                      --precision bf16|fp16): reductions and softmaxes in float32

With opt_level 0 (the default) the graph is taken as already optimised, and only the backend's passes run:
`decompose` (what no lowering here takes), then `float16` for a float16 model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pseudoformer.backends.options import CompileOptions
from pseudoformer.backends.pipeline import compile_pipeline, run
from pseudoformer.backends.torch.guard import require_torch
from pseudoformer.base.errors import BackendError
from pseudoformer.ir.graph import Graph

torch = require_torch()

from pseudoformer.backends.torch.lower import TorchLowering  # noqa: E402
from pseudoformer.backends.torch.lowerings import accepts  # noqa: E402


def pipeline(options: CompileOptions) -> list[str]:
    """The passes a torch compile with these options runs."""
    return compile_pipeline(options, "torch")


def prepare(graph: Graph, weights: Mapping[str, np.ndarray], options: CompileOptions,
            check: bool = False) -> tuple[Graph, dict[str, np.ndarray]]:
    """`graph` as this backend lowers it, and its weights then."""
    if options.dtype not in ("float32", "float16"):
        raise BackendError(f"dtype must be 'float32' or 'float16', got {options.dtype!r}")
    return run(graph, pipeline(options), weights=weights, options=options, accepts=accepts, check=check)


def to_torch(graph: Graph, weights: Mapping[str, np.ndarray], options: CompileOptions | None = None,
             **fields: Any) -> torch.fx.GraphModule:
    """`graph` with `weights` (by PARAM name) as a GraphModule: nn.Parameters under our names (names.py),
    forward(**inputs) → {output name: tensor}. `fields` set CompileOptions' fields (dtype, opt_level, …)."""
    options = (options or CompileOptions()).with_fields(fields)
    prepared, prepared_weights = prepare(graph, weights, options)
    return TorchLowering(prepared, torch.nn.Module()).lower(prepared_weights)


def to_torch_autocast(graph: Graph, weights: Mapping[str, np.ndarray]) -> torch.fx.GraphModule:
    """`to_torch` of a float32 graph whose forward runs under torch.autocast (mixed-precision training): its
    parameters float32, the master weights, and the ops the float16 pass keeps in float32 (reductions,
    softmaxes, scatters) and the norms reading their operands as float32 (lower.py's `fp32_anchors`), as
    autocast on CUDA does for a softmax, a sum or a norm and on the CPU does not. Without autocast it computes
    what `to_torch` does."""
    prepared, prepared_weights = prepare(graph, weights, CompileOptions())
    return TorchLowering(prepared, torch.nn.Module(), fp32_anchors=True).lower(prepared_weights)
