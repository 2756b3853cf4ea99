"""The training hyperparameters as one value: what `pseudoformer train`'s flags and `train()`'s keywords set,
checked once, here, for range and finiteness (each message names the flag). Compile options (backend,
threads, optimisation level) are not among them: they say how the step runs, not what it computes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from pseudoformer.base.errors import UsageError

OPTIMIZERS = ("sgd", "adamw")
SCHEDULES = ("constant", "cosine")
# What the forward and backward compute in (training/precision.py): float32, or bfloat16/float16 under
# torch.autocast with float32 master weights and optimizer state
PRECISIONS = ("fp32", "bf16", "fp16")
REDUCTIONS = ("sum", "mean")


@dataclass(frozen=True)
class TrainingOptions:
    """None where the training algorithm (its η, N_epochs) or the kind of file decides."""

    seq_len: int = 128  # tokens per sequence
    batch_size: int = 8  # sequences per step, or per micro-batch with grad_accum
    # micro-batches of batch_size whose gradients make one optimizer step: one batch grad_accum times the size
    grad_accum: int = 1
    # a step's objective: the mean over its examples of each one's loss, the paper's sum over positions ("sum"),
    # or the mean over the tokens the loss scores ("mean", torch's mean cross-entropy; training algorithms only)
    loss_reduction: str = "sum"
    epochs: int | None = None  # passes over the data: a training algorithm's N_epochs, else 1
    steps: int | None = None  # stop after this many optimizer steps
    lr: float | None = None  # η: a training algorithm's own η by default
    optimizer: str | None = None  # sgd (a training algorithm's line) or adamw (a loss algorithm's default)
    warmup: int = 0  # steps of linear warm-up before the cosine decay (adamw and sgd alike)
    schedule: str | None = None  # constant, or cosine (the default with --warmup)
    clip: float = 0.0  # the gradient's global norm is clipped to this (0: not clipped)
    weight_decay: float = 0.01  # AdamW's decoupled λ
    betas: tuple[float, float] = (0.9, 0.999)  # AdamW's β₁, β₂
    eps: float = 1e-8  # AdamW's ε
    decay_all: bool = False  # weight decay on norms' gains and biases too (by default only on matrices)
    # None: a training algorithm's loops run in order (the paper's `for n = 1, 2, …, N_data`), a loss
    # algorithm's data is shuffled each epoch by (seed, epoch)
    shuffle: bool | None = None
    seed: int = 0  # the init without --weights, the shuffle, ETraining's masking draws
    save_every: int = 0  # a checkpoint every N steps (0: at the end only)
    precision: str = "fp32"  # fp32, or bf16/fp16 compute over fp32 master weights (fp16 with loss scaling)

    def __post_init__(self) -> None:
        check(self)


def _whole(flag: str, value: object, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise UsageError(f"{flag} must be a whole number ≥ {least}, got {value!r}")


# The step computes in float32: a value past its range would be ±∞ there, and a nonzero one below its smallest
# normal number 0 or a denormal (an η of 1e-50 trains nothing, silently).
FLOAT32_MAX, FLOAT32_TINY = 3.4028234663852886e38, 1.1754943508222875e-38


def _real(flag: str, value: object, low: float, high: float = math.inf, *, closed_low: bool = True,
          closed_high: bool = False) -> None:
    if not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and \
            (abs(value) > FLOAT32_MAX or 0 < abs(value) < FLOAT32_TINY):
        raise UsageError(f"{flag} {value!r} is outside float32's range (its normal numbers, {FLOAT32_TINY:.3g} to "
                         f"{FLOAT32_MAX:.3g}), which the training step computes in")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or \
            value < low or (value == low and not closed_low) or value > high or (value == high and not closed_high):
        span = f"{'[' if closed_low else '('}{low:g}, {'∞' if high == math.inf else f'{high:g}'}" \
               f"{']' if closed_high else ')'}"
        raise UsageError(f"{flag} must be a finite number in {span}, got {value!r}")


def check(o: TrainingOptions) -> None:
    """Every hyperparameter's range, and the combinations that mean nothing, each one message."""
    if isinstance(o.seq_len, bool) or not isinstance(o.seq_len, int) or o.seq_len < 2:
        raise UsageError(f"--seq-len {o.seq_len!r}: a sequence needs at least 2 tokens (a token and the one after "
                         "it that the loss predicts)")
    _whole("--batch-size", o.batch_size, 1)
    _whole("--grad-accum", o.grad_accum, 1)
    if o.loss_reduction not in REDUCTIONS:
        raise UsageError(f"--loss-reduction {o.loss_reduction!r}: the reductions are {', '.join(REDUCTIONS)} (sum over "
                         "a sequence's positions, the paper's; mean over the tokens the loss scores)")
    if o.epochs is not None:
        _whole("--epochs", o.epochs, 1)
    if o.steps is not None:
        _whole("--steps", o.steps, 1)
    if o.lr is not None:
        _real("--lr", o.lr, 0.0, closed_low=False)
    if o.optimizer is not None and o.optimizer not in OPTIMIZERS:
        raise UsageError(f"--optimizer {o.optimizer!r}: the optimizers are {', '.join(OPTIMIZERS)}")
    _whole("--warmup", o.warmup, 0)
    if o.schedule is not None and o.schedule not in SCHEDULES:
        raise UsageError(f"schedule {o.schedule!r}: the schedules are {', '.join(SCHEDULES)}")
    _real("--clip", o.clip, 0.0)
    _real("--weight-decay", o.weight_decay, 0.0)
    if not (isinstance(o.betas, tuple) and len(o.betas) == 2):
        raise UsageError(f"--betas takes two numbers, β₁ and β₂, got {o.betas!r}")
    for i, b in enumerate(o.betas, 1):
        _real(f"--betas (β{i})", b, 0.0, 1.0)
    _real("--eps", o.eps, 0.0, closed_low=False)
    _whole("--seed", o.seed, 0)
    _whole("--save-every", o.save_every, 0)
    if o.precision not in PRECISIONS:
        raise UsageError(f"--precision {o.precision!r}: the precisions are {', '.join(PRECISIONS)}")
    if o.optimizer == "sgd":
        adamw_only = [f for f, v, d in (("--betas", o.betas, (0.9, 0.999)), ("--eps", o.eps, 1e-8))
                      if v != d]
        if adamw_only:
            raise UsageError(f"{', '.join(adamw_only)} set AdamW's constants; SGD has none (add --optimizer adamw)")


def options_from(**values: object) -> TrainingOptions:
    """TrainingOptions from keywords, each unknown one named (train()'s thin layer passes its own)."""
    known = {f.name for f in fields(TrainingOptions)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise UsageError(f"unknown training option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
    return TrainingOptions(**values)  # type: ignore[arg-type]
