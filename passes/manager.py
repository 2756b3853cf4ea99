"""Named passes, optimisation levels, and the manager that runs them.

A pass takes a graph and returns the rewritten graph and whether it changed anything. The
pipeline is a flat list of named passes per level; `run_passes` runs them in order, each to a
fixed point where it says so, and verifies the IR after every pass when asked (tests, --debug).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pseudoformer.ir import Graph
from pseudoformer.ir.verify import verify


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Graph], tuple[Graph, bool]]
    doc: str
    fixed_point: bool = False


def _registry() -> dict[str, Pass]:
    from pseudoformer.passes.cse import cse
    from pseudoformer.passes.fusions import fuse_attention, fuse_gelu, fuse_norms
    from pseudoformer.passes.head_batching import batch_heads
    from pseudoformer.passes.layout import to_row_major
    from pseudoformer.passes.simplify import simplify

    passes = [
        Pass("cse", cse, "common subexpression elimination: one node per distinct computation"),
        Pass("simplify", simplify, "algebraic simplification: transposes of transposes, identities", True),
        Pass("layer_norm_fusion", fuse_norms, "Algorithm 6 (with or without ε) → one layer_norm op"),
        Pass("gelu_fusion", fuse_gelu, "the tanh and erf GELU formulas → one gelu op"),
        Pass("attention_fusion", fuse_attention,
             "Algorithm 4's masked softmax(KᵀQ/√d) and V · A → one attention op; [[t ≤ t']] → causal"),
        Pass("head_batching", batch_heads,
             "Algorithm 5's H heads → one projection per Q/K/V (packed), one 4-D attention op"),
        Pass("layout", to_row_major,
             "the paper's features × positions → row-major [batch, positions, features], X·Wᵀ matmuls"),
    ]
    return {p.name: p for p in passes}


LEVELS: dict[int, list[str]] = {
    0: [],
    1: ["cse", "simplify", "cse"],
    # Attention fusion reads the paper's layout, so it runs before any layout change.
    2: ["cse", "simplify", "cse", "layer_norm_fusion", "gelu_fusion", "attention_fusion", "head_batching",
        "cse", "simplify", "layout", "cse", "simplify"],
}


def passes() -> dict[str, Pass]:
    return _registry()


def pipeline(level: int) -> list[Pass]:
    if level not in LEVELS:
        raise ValueError(f"no optimisation level -O{level} (choose {', '.join(f'-O{k}' for k in LEVELS)})")
    reg = _registry()
    return [reg[name] for name in LEVELS[level]]


def run_passes(graph: Graph, pipeline_: list[Pass], *, check: bool = False,
               after: Callable[[Pass, Graph, bool], None] | None = None) -> Graph:
    for p in pipeline_:
        for _ in range(32 if p.fixed_point else 1):
            graph, changed = p.run(graph)
            if check:
                verify(graph)
            if after is not None:
                after(p, graph, changed)
            if not changed:
                break
    return graph
