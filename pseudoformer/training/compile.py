"""A loss model (pseudoformer.load of a loss algorithm) → its training step graph, the frozen weights it
embeds, and the values its first step takes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from pseudoformer.ir import Graph
from pseudoformer.passes.manager import named_pipeline, pipeline, run_passes
from pseudoformer.passes.pass_base import PassContext
from pseudoformer.passes.split_step import SplitStep, halves, without_gradients
from pseudoformer.passes.training_step import Optimizer, step_graph, tie
from pseudoformer.training.runtimes import initial_state


@dataclass
class CompiledStep:
    graph: Graph  # the step graph
    frozen: dict[str, np.ndarray]  # the weights it embeds (PARAMs)
    state: dict[str, np.ndarray]  # the trainable parameters and optimizer state of its first step
    trainable: list[str]
    ties: dict[str, str]
    # the same step as a gradient graph and an in-place update graph (passes/split_step.py), for onnxruntime;
    # None where the update would read more than θ, the gradients and the optimizer state
    split: SplitStep | None = None


def tied_unembedding(graph: Graph, tied: bool) -> dict[str, str]:
    """{unembedding: embedding} for a model that reads W_u = W_eᵀ from a tied checkpoint (llama.alg's W_u)."""
    if not tied:
        return {}
    params = {p.attrs["name"]: p for p in graph.params()}
    out = {}
    for name, p in params.items():
        if name.rsplit(".", 1)[-1] == "W_u":
            emb = name[: -len("W_u")] + "W_e"
            if emb in params and tuple(params[emb].shape) == tuple(reversed(p.shape)):
                out[name] = emb
    return out


def loss_graph(graph: Graph, level: int, ties: Mapping[str, str]) -> Graph:
    """The loss graph as a step differentiates it: tied weights read as one, optimised at `level`, then the
    "training" pipeline (log ∘ softmax as one stable log_softmax, …). The torch trainer runs it as it is."""
    graph = tie(graph, ties)
    graph = run_passes(graph, pipeline(level))
    return run_passes(graph, named_pipeline("training"))


def compile_step(graph: Graph, weights: Mapping[str, np.ndarray], *,
                 train: Callable[[str], bool] | Iterable[str] | None = None, optimizer: Optimizer | None = None,
                 level: int = 2, ties: Mapping[str, str] | None = None, accumulate: bool = False) -> CompiledStep:
    """`accumulate`: the step of gradient accumulation (step_graph's), always split: its gradient half runs once
    per micro-batch, its update half once per optimizer step (training/accumulate.py)."""
    opt = optimizer or Optimizer()
    ties = dict(ties or {})
    graph = loss_graph(graph, level, ties)
    marked = step_graph(graph, train, opt, gradient_outputs=True, accumulate=accumulate)
    marked = run_passes(marked, named_pipeline("training-step"))
    step = without_gradients(marked)
    trainable = list(step.meta["training"]["trainable"])
    used = {p.attrs["name"] for p in step.params()}
    frozen = {k: np.asarray(v, np.float32) for k, v in weights.items() if k in used}
    state = initial_state(step, weights, opt)
    return CompiledStep(step, frozen, state, trainable, ties, _split(marked))


def _split(marked: Graph) -> SplitStep | None:
    """The marked step's gradient and update halves, each by its pipeline of passes, or None where the update
    would read more than θ, the gradients and the optimizer state."""
    ctx = PassContext()
    gradient = run_passes(marked, named_pipeline("training-gradient"), ctx=ctx)
    update = run_passes(marked, named_pipeline("training-update"), ctx=ctx)
    return None if halves(marked, ctx) is None else SplitStep(gradient, update)
