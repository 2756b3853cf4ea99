"""`train --backend torch`: the loss algorithm as a torch.nn.Module (backends/torch/), torch's autograd and
torch.optim's SGD or AdamW, run by the same loop as the other backends (loop.py: data order, step size
schedule, checkpoints, progress bar, loss curve).

What the step computes is the ONNX step's (passes/training_step.py): the objective is the mean of the
per-example loss over the batch, the gradient's global norm is clipped as clip_grad_norm_ clips it, the
update is torch.optim's (SGD without momentum; AdamW with its decoupled decay, its fused kernel, which
matches the ONNX step within 1e-5 and saves a pass per tensor group), and η is set on the optimizer before
each step. AdamW's β₁, β₂, ε and λ are the run's (TrainingOptions); as the ONNX step does, λ decays only the
parameters of rank ≥ 2 unless --decay-all (two param groups, the other with λ = 0). --resume puts the run's
m, v and t into the optimizer's state (load_state). Frozen parameters (--train) have requires_grad off; LoRA is the --train of its
A and B. `--precision bf16|fp16` runs the forward under torch.autocast over the float32 parameters, fp16 with
loss scaling (precision.py): the module is then to_torch_autocast's, its reductions and loss in float32.
With --grad-accum (or --loss-reduction mean) a step is micro-batches, each one's backward adding its weighted
gradient into .grad (accumulate.py; fp16's loss scale on each), then one clip and one update; under torchrun the
micro-batches before the last run without the ranks' gradient sync (DDP's no_sync, FSDP2's
set_requires_gradient_sync), so the step's summed gradient is reduced once. --torch-compile puts the module (after
DDP/FSDP2's wrap) under torch.compile, compiled at the first step (torch_compile.py).

Under `torchrun` (WORLD_SIZE > 1) the step runs on the process group (distributed.py): --batch-size is the
global batch, each rank takes its share of each batch's rows, and the gradient is averaged over the ranks
(DDP, or FSDP2 with --fsdp). Each rank's loss is weighted by its share of the rows, so that the average is
the global batch's mean even where the shares differ by a row. The validation loss (steps.py) takes `group`
from here: each rank computes its share of the held-out batches, and their sums are added over the ranks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pseudoformer.backends.options import CompileOptions
from pseudoformer.base.errors import BackendError, UsageError
from pseudoformer.ir import Graph
from pseudoformer.passes.autodiff import objective, trainable_params
from pseudoformer.passes.training_step import STEP, Optimizer
from pseudoformer.training.compile import loss_graph
from pseudoformer.training.precision import STATE_PREFIX, Autocast


@dataclass
class TorchStep:
    """What the loop and its outputs read of a compiled step (compile.CompiledStep's fields they use)."""

    trainable: list[str]
    ties: dict[str, str]
    frozen: dict[str, np.ndarray] = field(default_factory=dict)
    # AdamW's initial m.<name>, v.<name> and t, by the ONNX step's names, and fp16's loss scale (amp.*): what
    # --resume replaces (loop.py)
    state: dict[str, np.ndarray] = field(default_factory=dict)


class TorchRuntime:
    """The loss module, its optimizer and (under torchrun) its process group: `step(feeds, η)` → the batch's
    mean loss; `values()` → the parameters and the optimizer state by our names."""

    def __init__(self, graph: Graph, weights: Mapping[str, np.ndarray], names: list[str], opt: Optimizer,
                 loss: str, *, options: CompileOptions | None = None, fsdp: bool = False,
                 precision: str = "fp32") -> None:
        import torch

        from pseudoformer.backends.torch.compile import to_torch, to_torch_autocast
        from pseudoformer.backends.torch.names import our_name
        from pseudoformer.training import distributed

        options = options or CompileOptions(backend="torch")
        if options.threads is not None:
            torch.set_num_threads(options.threads)
        self.torch = torch
        self.group = distributed.Group.from_env(options.provider == "cuda")
        self.amp = Autocast(precision, self.group.device)
        try:
            module = (to_torch_autocast if self.amp.reduced else to_torch)(graph, weights)
        except BackendError as e:
            raise UsageError(str(e)) from None
        trained = set(names)
        for name, p in module.named_parameters():
            p.requires_grad_(our_name(name) in trained)
        # DDP or FSDP2 (or the module itself), whose gradient sync a micro-batch turns off (Group.syncing)
        self.wrapped = self.module = self.group.wrap(module.to(self.group.device), fsdp=fsdp)
        # after the wrap: FSDP2 replaces each parameter by its shard (a DTensor) in place; and from the plain
        # module, not from a wrapper (DDP's `module.`, torch.compile's `_orig_mod.`)
        self.names = {p: our_name(name) for name, p in module.named_parameters() if p.requires_grad}
        # torch.compile after DDP/FSDP2, as torch documents (torch_compile.py); compiled at the first step
        self.compiling = contextlib.nullcontext
        if options.torch_compile:
            from pseudoformer.training.torch_compile import compile_errors, compiled

            # one graph unless DDP or FSDP2 wrapped it (distributed.Group.wrap; fully_shard returns the module
            # itself), whose hooks break the graph by design
            self.module = compiled(self.module, whole=self.group.world == 1 and not fsdp, rules=options.inductor_rules)
            self.compiling = compile_errors
        self.params = list(self.names)
        self.loss = loss
        self.clip = opt.clip
        if opt.kind == "sgd":
            self.optimizer = torch.optim.SGD(self.params, lr=0.0)
        else:
            # λ on the matrices only, unless decay_all (as passes/training_step.py's AdamW update decays)
            decays = [opt.decay_all or p.dim() >= 2 for p in self.params]
            groups = [{"params": [p for p, d in zip(self.params, decays, strict=True) if d == on], "weight_decay": wd}
                      for on, wd in ((True, opt.weight_decay), (False, 0.0)) if on in decays]
            self.optimizer = torch.optim.AdamW(groups, lr=0.0, betas=(opt.beta1, opt.beta2), eps=opt.eps,
                                               fused=True)
        self.kind = opt.kind

    @property
    def writes(self) -> bool:
        """Whether this process writes the checkpoint and the loss curve (rank 0 of a group)."""
        return self.group.writes

    @property
    def skipped(self) -> bool:
        """Whether the last step's update was skipped (fp16: its gradients overflowed at the loss scale)."""
        return self.amp.skipped

    def step(self, feeds: Mapping[str, np.ndarray], eta: float) -> float:
        return self.step_many([(dict(feeds), 1.0)], eta)

    def step_many(self, micro: list[tuple[dict[str, np.ndarray], float]], eta: float) -> float:
        """One optimizer step over micro-batches, each (its feeds, its weight in the step's objective:
        accumulate.py), their gradients summed into .grad by autograd; the step's loss, before the update. Under
        torchrun the ranks reduce the summed gradient once, in the last micro-batch's backward (Group.syncing),
        and add their losses once."""
        torch = self.torch
        self.optimizer.zero_grad(set_to_none=True)
        local = torch.zeros((), dtype=torch.float64, device=self.group.device)
        with self.compiling():  # --torch-compile: a new shape's forward and backward compile here
            for i, (feeds, weight) in enumerate(micro):
                with self.group.syncing(self.wrapped, sync=i == len(micro) - 1):
                    local += weight * self._backward(feeds, weight)
        loss = self.group.sum(local)
        if self.clip > 0:
            self.amp.unscale(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        for group in self.optimizer.param_groups:
            group["lr"] = eta
        self.amp.step(self.optimizer)
        return loss

    def _backward(self, feeds: Mapping[str, np.ndarray], weight: float) -> Any:
        """∇ of `weight` times the batch's mean loss, added into .grad; this rank's part of the batch's mean loss
        (a float64 tensor: the parts summed over the ranks are the mean)."""
        torch = self.torch
        rows = len(next(iter(feeds.values())))
        share = self.group.share(feeds)
        with self.amp.forward():
            out = self.module(**{k: torch.from_numpy(np.ascontiguousarray(v)).to(self.group.device)
                                 for k, v in share.items()})[self.loss]
        out = out.float()  # the loss and its objective in float32 whatever the forward computed in
        if out.dim() == 1:  # the per-example loss: this rank's part of the global batch's mean
            total = out.sum()
            scaled = total * (self.group.world * weight / rows)
        else:  # one number for the batch: weighted by this rank's share of the rows
            total = out * (len(next(iter(share.values()))) / rows * self.group.world)
            scaled = total * weight
        self.amp.backward(scaled)
        return total.detach().double() / (rows if out.dim() == 1 else self.group.world)

    def initial_state(self) -> dict[str, np.ndarray]:
        """AdamW's state before the first step, by the names values() gives it (none for SGD), and fp16's loss
        scale."""
        if self.kind != "adamw":
            return self.amp.state()
        out: dict[str, np.ndarray] = {STEP: np.zeros((), np.float32), **self.amp.state()}
        for p, name in self.names.items():
            out[f"m.{name}"] = out[f"v.{name}"] = np.zeros(tuple(p.shape), np.float32)
        return out

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        """AdamW's m, v and t from a run's optimizer.safetensors (checked against initial_state by loop.py),
        as torch.optim keeps them: the fused kernel's step a float32 tensor on the parameter's device; and fp16's
        loss scale."""
        self.amp.load_state({k: v for k, v in state.items() if k.startswith(STATE_PREFIX)})
        if self.kind != "adamw":
            return
        torch = self.torch
        t = float(np.asarray(state[STEP]).reshape(()))
        for p, name in self.names.items():
            self.optimizer.state[p] = {
                "step": torch.tensor(t, dtype=torch.float32, device=p.device),
                "exp_avg": self.group.like(p, state[f"m.{name}"]),
                "exp_avg_sq": self.group.like(p, state[f"v.{name}"])}

    def values(self) -> dict[str, np.ndarray]:
        """The trained parameters, and AdamW's m, v and step count, by our names (as the other runtimes
        name them: m.<name>, v.<name>, t), and fp16's loss scale (amp.scale, amp.growth)."""
        out: dict[str, np.ndarray] = self.amp.state()
        t = None
        for p, name in self.names.items():
            out[name] = self.group.full(p.detach())
            state = self.optimizer.state.get(p, {})
            if "exp_avg" in state:
                out[f"m.{name}"] = self.group.full(state["exp_avg"])
                out[f"v.{name}"] = self.group.full(state["exp_avg_sq"])
                t = state["step"]
        if self.kind == "adamw":
            out[STEP] = np.asarray(float(t) if t is not None else 0.0, np.float32)
        return out

    def current(self) -> dict[str, np.ndarray]:
        """values(), which the checkpoint's writers read (training/steps.py asks every runtime for this)."""
        return self.values()


def torch_step(graph: Graph, weights: Mapping[str, np.ndarray], trainable: Iterable[str] | None,
               opt: Optimizer, level: int, ties: Mapping[str, str], loss: str | None, *,
               options: CompileOptions | None = None, fsdp: bool = False,
               precision: str = "fp32") -> tuple[TorchStep, TorchRuntime]:
    """The step of `graph`'s loss for the loop: the same loss graph the ONNX step differentiates
    (compile.loss_graph, at -O `level`), run as a torch module where `options` say (threads, provider,
    torch_compile)."""
    prepared = loss_graph(graph, level, dict(ties))
    names = list(trainable_params(prepared, trainable))
    if not names:
        raise UsageError("nothing to train: every parameter is frozen")
    name = loss or prepared.outputs[0][0]
    if name not in dict(prepared.outputs):
        raise UsageError(f"the loss output {name!r} was not found")
    objective(prepared, name)  # refuses a loss that is not one number per example
    used = {p.attrs["name"] for p in prepared.params()}
    runtime = TorchRuntime(prepared, {k: v for k, v in weights.items() if k in used}, names, opt, name,
                           options=options, fsdp=fsdp, precision=precision)
    return TorchStep(names, dict(ties), state=runtime.initial_state()), runtime
