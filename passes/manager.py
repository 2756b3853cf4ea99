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
from pseudoformer.passes.pass_base import Pass, PassContext, plain, with_refusals

__all__ = ["LEVELS", "PIPELINES", "Pass", "PassContext", "named_pipeline", "passes", "pipeline", "run_passes"]


def _registry() -> dict[str, Pass]:
    from pseudoformer.passes import backend_prep, contrib_ops, generation_passes, quantize
    from pseudoformer.passes.cse import cse
    from pseudoformer.passes.fusions import (
        fuse_attention,
        fuse_experts,
        fuse_gelu,
        fuse_norms,
        fuse_rotary,
        fuse_swiglu,
        gather_untransposed,
        pick_before_slice,
        pick_one_hot,
        stable_log_softmax,
    )
    from pseudoformer.passes.head_batching import batch_heads
    from pseudoformer.passes.layout import to_row_major
    from pseudoformer.passes.simplify import simplify
    from pseudoformer.passes.training_step import fold_batched_gradients, fold_scatters

    passes = [
        Pass("cse", plain(cse), "common subexpression elimination: one node per distinct computation"),
        Pass("simplify", plain(simplify), "algebraic simplification: transposes of transposes, identities", True),
        Pass("layer_norm_fusion", with_refusals(fuse_norms), "Algorithm 6 (with or without ε) → one layer_norm op"),
        Pass("gelu_fusion", with_refusals(fuse_gelu), "the tanh and erf GELU formulas → one gelu op"),
        Pass("swiglu_fusion", with_refusals(fuse_swiglu),
             "SiLU(W₁ X) ⊙ W₃ X → one swiglu op over one packed projection [W₁; W₃] X"),
        Pass("rotary_fusion", with_refusals(fuse_rotary),
             "the rotate-half RoPE [x₁ cos θ − x₂ sin θ; x₂ cos θ + x₁ sin θ] → one rotary op"),
        Pass("attention_fusion", with_refusals(fuse_attention),
             "Algorithm 4's masked softmax(KᵀQ/√d) and V · A → one attention op; [[t ≤ t']] → causal"),
        Pass("expert_matmul_fusion", with_refusals(fuse_experts),
             "Σ_j W[r, i, j] x[j] over per-row gathered expert matrices → one expert_matmul (no per-row copies); "
             "SwiGLU experts' gate and up products packed into one"),
        Pass("one_hot_pick", with_refusals(pick_one_hot),
             "Σ_a [[range = w]] ⊙ p, a checked per-example index's one-hot pick → one gather_elements (training)"),
        Pass("log_softmax", with_refusals(stable_log_softmax),
             "log ∘ softmax (through slices, gathers and one-hot picks) → a stable log-softmax (training)"),
        Pass("pick_before_slice", with_refusals(pick_before_slice),
             "a pick from a slice → the pick from the whole, sliced: no copy of the sliced data (training)"),
        Pass("batched_weight_gradient", with_refusals(fold_batched_gradients),
             "Σ_b a_bᵀ c_b (a weight's gradient over a batch) → one product over the B·ℓ rows; (xᵀ y)ᵀ → yᵀ x "
             "(training step)"),
        Pass("gather_of_transpose", with_refusals(gather_untransposed),
             "gather(transpose(W), i) → transpose(gather(W, i)): no transposed copy of an embedding table (training)"),
        Pass("scatter_fold", with_refusals(fold_scatters),
             "Σ_a scatter_add(0, i, u; a) → Σ_a u; x ± scatter_add(0, i, u) → scatter_add(±x, i, ±u) (training step)"),
        Pass("head_batching", with_refusals(batch_heads),
             "Algorithm 5's H heads → one projection per Q/K/V (packed), one 4-D attention op"),
        Pass("layout", plain(to_row_major),
             "the paper's features × positions → row-major [batch, positions, features], X·Wᵀ matmuls"),
        *backend_prep.PASSES,
        *contrib_ops.PASSES,
        *quantize.PASSES,
        *generation_passes.PASSES,
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
    "padding": ["padding_mask"],
    # before the autodiff of a loss graph (passes/autodiff.py): the loss's log ∘ softmax made stable
    "training": ["one_hot_pick", "log_softmax", "pick_before_slice", "gather_of_transpose", "cse"],
    # on the training step graph (passes/training_step.py), after the autodiff wrote its backward part
    "training-step": [*LEVELS[1], "batched_weight_gradient", "scatter_fold", "cse"],
    # weight quantization (--quantize), on the -O2 graph before generation derives its decoder from it
    "quantize": ["quantize"],
    # the incremental decoder of a -O2 graph: prefill, decode step, and the encoder's share
    "generation-prefill": ["incremental_prefill", "last_position", *LEVELS[1]],
    "generation-step": ["incremental_step", "last_position", *LEVELS[1]],
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
