"""Named passes, named pipelines of them, and the manager that runs them.

A pass takes a graph and a PassContext and returns the rewritten graph and whether it changed
anything. A pipeline is a flat list of pass names: the optimisation levels -O0, -O1, -O2, the
preparation each backend needs before lowering (cache fusion, packed heads, decompositions, float16,
constant folding), and the derivations generation runs (the incremental decoder's prefill and step,
the last-position cut). `run_passes` runs a pipeline in order, each pass to a fixed point where it
says so, and verifies the IR after every pass when asked (tests, --debug). `inspect --passes` lists
them all.
"""

from __future__ import annotations

from collections.abc import Callable

from pseudoformer.ir import Graph
from pseudoformer.ir.verify import verify
from pseudoformer.passes.pass_base import Pass, PassContext, plain

__all__ = ["LEVELS", "PIPELINES", "Pass", "PassContext", "named_pipeline", "passes", "pipeline", "run_passes"]


def _registry() -> dict[str, Pass]:
    from pseudoformer.passes import (
        backend_prep,
        contrib_ops,
        fusions,
        generation_passes,
        quantize,
        split_step,
        update_chunks,
    )
    from pseudoformer.passes.cse import cse
    from pseudoformer.passes.head_batching import batch_heads
    from pseudoformer.passes.layout import to_row_major
    from pseudoformer.passes.simplify import simplify
    from pseudoformer.passes.training_step import fold_batched_gradients, fold_scatters, transpose_rows_first

    passes = [
        Pass("cse", plain(cse), "common subexpression elimination: one node per distinct computation"),
        Pass("simplify", plain(simplify), "algebraic simplification: transposes of transposes, identities", True),
        *fusions.PASSES,
        fold_batched_gradients,
        transpose_rows_first,
        fold_scatters,
        batch_heads,
        Pass("layout", plain(to_row_major),
             "the paper's features × positions → row-major [batch, positions, features], X·Wᵀ matmuls"),
        *backend_prep.PASSES,
        *contrib_ops.PASSES,
        *quantize.PASSES,
        *generation_passes.PASSES,
        *split_step.PASSES,
        *update_chunks.PASSES,
    ]
    return {p.name: p for p in passes}


LEVELS: dict[int, list[str]] = {
    0: [],
    1: ["cse", "simplify", "cse"],
    # Attention fusion reads the paper's layout, so it runs before any layout change.
    2: ["cse", "simplify", "cse", "layer_norm_fusion", "gelu_fusion", "swiglu_fusion", "rotary_fusion",
        "attention_fusion", "expert_matmul_fusion", "head_batching",
        "cse", "simplify", "layout", "cse", "simplify"],
}

# Pipelines besides the levels, run after a level by what needs them; backends/pipeline.py puts a
# compile's together from its options.
PIPELINES: dict[str, list[str]] = {
    # ONNX opset ≥ 23 (the Attention op); before, only the decompositions and precision apply
    "onnx": ["cache_fusion", "packed_heads", "decompose", "float16"],
    # onnxruntime's com.microsoft kernels (--contrib-ops), after "onnx": each fused op is one ONNX node
    "onnx-contrib": ["group_query_attention_fusion", "kv_lengths", "skip_norm_fusion"],
    "tvm": ["decompose", "float16", "fold_constants"],
    "torch": ["concat_of_transposes", "decompose", "float16"],
    "padding": ["padding_mask"],
    # before the autodiff of a loss graph (passes/autodiff.py): the loss's log ∘ softmax made stable
    "training": ["one_hot_pick", "log_softmax", "pick_before_slice", "gather_of_transpose", "cse"],
    # on the training step graph (passes/training_step.py), after the autodiff wrote its backward part
    "training-step": [*LEVELS[1], "batched_weight_gradient", "transpose_then_flatten", "scatter_fold", "cse"],
    # onnxruntime's split step, from the training step marked with its gradients: its two halves, and the
    # update cut into cache-sized pieces (at the runtime's `update_chunk`)
    "training-gradient": ["step_gradient"],
    "training-update": ["step_update"],
    "training-update-pieces": ["update_pieces"],
    # weight quantization (--quantize), on the -O2 graph before generation derives its decoder from it
    "quantize": ["quantize"],
    # the incremental decoder of a -O2 graph: prefill, decode step, and the encoder's share
    "generation-prefill": ["incremental_prefill", "last_position", *LEVELS[1]],
    "generation-step": ["incremental_step", "last_position", *LEVELS[1]],
    # the step as TVM runs it: the cache in buffers (passes/kv_buffers.py), no last-position cut
    "generation-step-buffered": ["incremental_step_buffered"],
    "generation-encoder": ["incremental_encoder", *LEVELS[1]],
    "generation-uncached": ["last_position", *LEVELS[1]],
}


def passes() -> dict[str, Pass]:
    return _registry()


def pipeline(level: int) -> list[Pass]:
    if level not in LEVELS:
        raise ValueError(f"no optimisation level -O{level} (choose {', '.join(f'-O{k}' for k in LEVELS)})")
    reg = _registry()
    return [reg[name] for name in LEVELS[level]]


def named_pipeline(name: str) -> list[Pass]:
    """The passes of pipeline `name` (a compile's are assembled from its options by backends/pipeline.py)."""
    reg = _registry()
    return [reg[p] for p in PIPELINES[name]]


def run_passes(graph: Graph, pipeline_: list[Pass], *, check: bool = False,
               after: Callable[[Pass, Graph, bool], None] | None = None, ctx: PassContext | None = None) -> Graph:
    ctx = ctx if ctx is not None else PassContext()
    for p in pipeline_:
        for _ in range(32 if p.fixed_point else 1):
            graph, changed = p.run(graph, ctx)
            if check:
                verify(graph)
            if after is not None:
                after(p, graph, changed)
            if not changed:
                break
    return graph
