"""Gradient accumulation (`train --grad-accum N`) and the per-token mean (`--loss-reduction mean`): an optimizer
step whose objective is a weighted sum over micro-batches, each micro-batch's objective (the mean of its
examples' losses) times a weight the host gives it.

A step takes the N·B examples a batch of N·B would take (the same order, shuffle and masking draws), cut into
micro-batches of B rows. With the paper's sum over positions the weight of a micro-batch of b rows is b / (N·B),
so the step's objective is the mean over all N·B examples, one batch N times the size; with the per-token mean
it is b / T, T the tokens the loss scores in the whole step (ℓ − 1 a sequence for next-token prediction,
the masked ones for ETraining), so the objective is the mean over those tokens, torch's
`cross_entropy(reduction="mean")` over the step's tokens.

The step graph (passes/training_step.py, `accumulate`) is cut in two (passes/split_step.py): its gradient half
adds ∇ · weight to the sum so far (`acc.<name> + ∇ · weight`, acc zeros on a step's first micro-batch) and
runs once per micro-batch; its update half clips that sum and updates θ once per optimizer step. onnxruntime
writes the sum over its own buffer (OrtSplitStep.step_many, runtimes.py: θ, the sum, m and v held once, as
torch holds θ, .grad, m and v); the interpreter and TVM hand each half's outputs to the next call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pseudoformer.base.errors import UsageError
from pseudoformer.passes.autodiff import GRAD
from pseudoformer.passes.split_step import SplitStep
from pseudoformer.passes.training_step import ACC, LR, NEW, WEIGHT
from pseudoformer.training.runtimes import OrtSplitStep, check_provider, is_step_input

# (a micro-batch's feeds, its weight in the step's objective)
Micro = tuple[dict[str, np.ndarray], float]


def micro_batches(feeds: Mapping[str, np.ndarray], size: int, scored: float | None) -> list[Micro]:
    """A step's feeds (every loss input, its rows the step's examples) cut into micro-batches of `size` rows
    (the last may be shorter), each weighted by its rows over the step's examples, or over `scored`, the tokens
    the step's loss scores, for the per-token mean (at least 1: a step that scores none has a loss of 0)."""
    rows = len(next(iter(feeds.values())))
    whole = float(rows) if scored is None else max(float(scored), 1.0)
    out = []
    for start in range(0, rows, size):
        part = {k: v[start:start + size] for k, v in feeds.items()}
        out.append((part, len(next(iter(part.values()))) / whole))
    return out


class _Halves:
    """The two halves run one after the other, each half's outputs fed to the next call (interpreter, TVM)."""

    def __init__(self, split: SplitStep, state: Mapping[str, np.ndarray]) -> None:
        self.carried = [k[len(NEW):] for k, _ in split.update.outputs if k.startswith(NEW)]
        names = [n.attrs["name"] for n in split.gradient.inputs]
        self.theta = [k for k in names if k in self.carried]
        self.batch_names = [k for k in names if not is_step_input(k, self.carried)]
        self.state = {k: self._put(np.array(v, order="C")) for k, v in state.items()}
        self.shapes = {k: np.shape(state[k]) for k in self.theta}

    def _put(self, array: np.ndarray) -> Any:
        return array

    def _call(self, half: str, values: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def step_many(self, micro: list[Micro], lr: float) -> float:
        """One optimizer step over micro-batches (see the module's docstring); the step's loss, before the update."""
        loss = 0.0
        acc = {ACC + k: self._put(np.zeros(s, np.float32)) for k, s in self.shapes.items()}
        for feeds, weight in micro:
            out = self._call("gradient", {**{k: feeds[k] for k in self.batch_names},
                                          **{k: self.state[k] for k in self.theta}, **acc,
                                          WEIGHT: np.asarray(weight, np.float32)})
            acc = {ACC + k: out[GRAD + k] for k in self.theta}
            loss += weight * float(out["loss"])
        out = self._call("update", {LR: np.asarray(lr, np.float32), **self.state,
                                    **{GRAD + k: acc[ACC + k] for k in self.theta}})
        self.state = {k: out[NEW + k] for k in self.carried}
        return loss

    def values(self) -> dict[str, np.ndarray]:
        return {k: np.array(v.numpy() if hasattr(v, "numpy") else v) for k, v in self.state.items()}

    def current(self) -> dict[str, np.ndarray]:
        """values(): what the checkpoint's writers read of every runtime (training/steps.py)."""
        return self.values()


class InterpreterHalves(_Halves):
    def __init__(self, split: SplitStep, frozen: Mapping[str, np.ndarray], state: Mapping[str, np.ndarray]) -> None:
        self.graphs, self.frozen = {"gradient": split.gradient, "update": split.update}, dict(frozen)
        super().__init__(split, state)

    def _call(self, half: str, values: dict[str, Any]) -> dict[str, Any]:
        from pseudoformer.ir.interpreter import run

        return run(self.graphs[half], values, self.frozen if half == "gradient" else {})


class TvmHalves(_Halves):
    """Each half compiled by TVM; θ, the state and the sum stay TVM tensors between calls."""

    def __init__(self, split: SplitStep, frozen: Mapping[str, np.ndarray], state: Mapping[str, np.ndarray]) -> None:
        import tvm

        from pseudoformer.backends.tvm.build import compile_graph

        self.tvm, self.dev = tvm, tvm.cpu()
        self.models = {"gradient": compile_graph(split.gradient, frozen), "update": compile_graph(split.update, {})}
        super().__init__(split, state)

    def _put(self, array: np.ndarray) -> Any:
        return self.tvm.runtime.tensor(array, self.dev)

    def _call(self, half: str, values: dict[str, Any]) -> dict[str, Any]:
        model = self.models[half]
        return model.run({k: values[k] for k in model.input_names}, keep=frozenset(model.output_names) - {"loss"})


def make_accumulating(backend: str, split: SplitStep | None, frozen: Mapping[str, np.ndarray],
                      state: Mapping[str, np.ndarray], graph: Any, **options: Any) -> Any:
    """The runtime of an accumulating step (compile_step(..., accumulate=True)) on `backend`: `step_many`."""
    if split is None:
        raise UsageError("this step's update reads more than θ, its gradients and the optimizer state, so its "
                         "gradients cannot be accumulated: drop --grad-accum and --loss-reduction mean")
    check_provider(backend, options)
    if backend == "interpreter":
        return InterpreterHalves(split, frozen, state)
    if backend == "tvm":
        return TvmHalves(split, frozen, state)
    return OrtSplitStep(graph, frozen, state, split, **options)
