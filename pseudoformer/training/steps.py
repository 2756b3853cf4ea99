"""The steps of a training run: the batches in the data's order, one step each on the compiled step's runtime,
the progress (a bar on a terminal, a plain line in a log), the validation loss, and the checkpoints (every
--save-every steps and at the end, never of non-finite parameters). training/loop.py prepares a `Run`;
`run_steps` runs it.

A NaN or infinite loss stops training with a message naming the step, after the last good checkpoint was kept
(the bad step's update is never saved); Ctrl-C and SIGTERM save a checkpoint of the last finished step and
return cleanly. A step whose update the runtime skipped (`--precision fp16`: its gradients overflowed at the
loss scale, training/precision.py) is counted in the progress line and listed in training.json.
"""

from __future__ import annotations

import math
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pseudoformer.base.errors import UsageError
from pseudoformer.model import Model
from pseudoformer.passes.training_step import STEP
from pseudoformer.training import data as datasets
from pseudoformer.training import run_folder
from pseudoformer.training.accumulate import micro_batches
from pseudoformer.training.distributed import Group
from pseudoformer.training.draws import draw_masks
from pseudoformer.training.outputs import save_checkpoint, write_loss_curve, write_meta
from pseudoformer.training.precision import STATE_PREFIX

if TYPE_CHECKING:
    from pseudoformer.training.compile import CompiledStep
    from pseudoformer.training.loop import TrainingSetup
    from pseudoformer.training.options import TrainingOptions
    from pseudoformer.training.torch_loop import TorchStep


# (step, loss, tokens/s, validation loss: NaN where it was not measured)
Row = tuple[int, float, float, float]


class TrainingStopped(UsageError):
    """Training cannot go on (a loss that is not finite); the last good checkpoint is kept."""


@dataclass
class TrainResult:
    losses: list[float]
    weights: dict[str, np.ndarray]  # every parameter after the last finished step
    steps: int
    interrupted: bool = False
    out: Path | None = None
    history: list[Row] = field(default_factory=list)  # (step, loss, tokens/s, validation loss or NaN)
    skipped: list[int] = field(default_factory=list)  # the steps whose update was skipped (fp16 overflow)


def step_size(step: int, lr: float, warmup: int, total: int, schedule: str) -> float:
    """η at step (from 1): constant, or linear warm-up over `warmup` steps then cosine decay to 0 at `total`."""
    if schedule == "constant":
        return lr
    if warmup and step <= warmup:
        return lr * step / warmup
    span = max(total - warmup, 1)
    return lr * 0.5 * (1 + math.cos(math.pi * min(step - warmup, span) / span))


def _feeds(plan: Any, model: Model, rows: Any, where: tuple[int, int, int], *,
           expectation: bool = False) -> dict[str, np.ndarray]:
    """The loss graph's inputs for a batch of sequences: the tokens, ETraining's masked copy (its draws
    data.masked_positions's for (seed, epoch, batch) = `where`), or EDTraining's pairs (a dict by the
    dataset's member names, z and x); and the masks of the model's random draws (training/draws.py, drawn for
    `where`, or with `expectation` each draw's expectation: the model at inference)."""
    feeds = _data_feeds(plan, model, rows, where)
    return {**feeds, **draw_masks(model.graph, feeds, *where, expectation=expectation)}


def _data_feeds(plan: Any, model: Model, rows: Any, where: tuple[int, int, int]) -> dict[str, np.ndarray]:
    # The data stays in its file's integer type (data.read_tokens); each batch is widened as it is fed.
    rows = {k: np.asarray(a, np.int64) for k, a in rows.items()} if isinstance(rows, dict) else np.asarray(rows, np.int64)
    if plan is None:
        return {model.input_names[0]: rows}
    if isinstance(rows, dict):
        return {i: rows[d] for i, d in zip(plan.loss_inputs, plan.data, strict=True)}
    if plan.masking is not None:
        m, hp = plan.masking, model.config.hyperparameters
        token = m.mask_token if isinstance(m.mask_token, int) else int(hp[m.mask_token])
        hide = datasets.masked_positions(rows.shape, float(hp[m.probability]), *where)
        return {m.masked_input: np.where(hide, token, rows), m.target_input: rows,
                m.positions_input: hide.astype(np.float32)}
    return {plan.loss_inputs[0]: rows}


@dataclass
class Run:
    model: Model
    step: CompiledStep | TorchStep
    runtime: Any
    rows: Any
    plan: Any
    opts: TrainingOptions
    total: int
    lr: float
    schedule: str
    shuffle: bool
    outdir: Path | None
    hf: tuple[Path | None, str | None]
    setup: TrainingSetup
    start: int  # steps already done (--resume)
    earlier: list[Row]  # their loss curve
    val: Any = None  # the validation data's rows (--val-data)
    skipped: list[int] = field(default_factory=list)  # steps whose update was skipped, a resumed run's first
    # every parameter's name, in the model's order: model.weights keeps only those the runtime does not hold
    names: list[str] = field(default_factory=list)

    @property
    def weighted(self) -> bool:
        """Whether a step is micro-batches weighted by the host (accumulate.py): --grad-accum, the per-token mean."""
        return self.opts.grad_accum > 1 or self.opts.loss_reduction == "mean"

    @property
    def step_rows(self) -> int:
        """The examples an optimizer step takes: --batch-size, times --grad-accum."""
        return self.opts.batch_size * self.opts.grad_accum


def _positions(run: Run) -> Iterator[tuple[int, int, Any]]:
    """(epoch, batch index, batch) of every step, from the first, epoch after epoch, until the steps run out."""
    count = 0
    epoch = 0
    while count < run.total:
        for i, batch in enumerate(datasets.batches(run.rows, run.step_rows, run.opts.seed, epoch, run.shuffle)):
            if count >= run.total:
                return
            yield epoch, i, batch
            count += 1
        epoch += 1


def _scored(run: Run, feeds: dict[str, np.ndarray]) -> float | None:
    """The tokens a batch's loss scores, for the per-token mean (None with the paper's sum): ETraining's masked
    positions, or next-token prediction's ℓ − 1 a sequence (of x, the last loss input: DTraining's only one,
    EDTraining's second)."""
    if run.opts.loss_reduction != "mean":
        return None
    if run.plan.masking is not None:
        return float(feeds[run.plan.masking.positions_input].sum())
    x = feeds[run.plan.loss_inputs[-1]]
    return float(x.shape[0] * (x.shape[1] - 1))


def run_steps(run: Run) -> TrainResult:
    from tqdm import tqdm

    history = list(run.earlier)
    interrupted = [False]

    def on_sigint(signum: int, frame: Any) -> None:
        interrupted[0] = True

    # Ctrl-C and SIGTERM (a scheduler's stop, `kill`) alike: finish the step, save, and return.
    previous = {sig: signal.signal(sig, on_sigint) for sig in (signal.SIGINT, signal.SIGTERM)}
    # On a terminal a bar; in a log (stderr no terminal) a plain line every --log-every steps, not one
    # carriage-returned line that grows with every update.
    tty = sys.stderr.isatty()
    bar = tqdm(total=run.total, initial=run.start, desc="train", unit="step", disable=not (run.setup.progress and tty),
               dynamic_ncols=True)
    done = run.start
    try:
        for k, (epoch, index, batch) in enumerate(_positions(run)):
            if interrupted[0]:
                break
            if k < run.start:
                continue  # --resume: the steps already run (their batches and masks are drawn by position)
            t0 = time.perf_counter()
            eta = step_size(done + 1, run.lr, run.opts.warmup, run.total, run.schedule)
            feeds = _feeds(run.plan, run.model, batch, (run.opts.seed, epoch, index))
            if run.weighted:  # the step's examples as micro-batches, each weighted in the objective
                micro = micro_batches(feeds, run.opts.batch_size, _scored(run, feeds))
                loss = run.runtime.step_many(micro, eta)
            else:
                loss = run.runtime.step(feeds, eta)
            if not math.isfinite(loss):
                _stop(done + 1, loss, run.outdir)
            done += 1
            if getattr(run.runtime, "skipped", False):
                run.skipped.append(done)
            rate = datasets.token_count(batch) / (time.perf_counter() - t0)
            val = _val_loss(run) if run.val is not None and (done % run.setup.val_every == 0 or
                                                             done == run.total) else math.nan
            history.append((done, loss, rate, val))
            shown = {"val": f"{val:.4f}"} if math.isfinite(val) else {}
            if run.skipped:
                shown["skipped"] = str(len(run.skipped))
            bar.set_postfix(loss=f"{loss:.4f}", **shown, tok_s=f"{rate:,.0f}")
            bar.update(1)
            if run.setup.progress and not tty and (done % run.setup.log_every == 0 or done == run.total):
                said = f"  val {val:.6g}" if math.isfinite(val) else ""
                said += f"  skipped {len(run.skipped)} (fp16 overflow)" if run.skipped else ""
                print(f"step {done}/{run.total}  loss {loss:.6g}{said}  {rate:,.0f} tokens/s", file=sys.stderr,
                      flush=True)
            if run.outdir is not None and run.opts.save_every and done % run.opts.save_every == 0:
                _save(run, history, done)
    finally:
        bar.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    ours = history[len(run.earlier):]
    # The runtime's own arrays, not copies: training is over, and the result keeps them when the runtime goes.
    values = run.runtime.current()
    result = TrainResult([h[1] for h in ours], _weights(run, values), done, interrupted[0], run.outdir, ours,
                         [k for k in run.skipped if k > run.start])
    if run.outdir is not None:
        _save(run, history, done)
    return result


# The epoch number of the validation batches' masking draws (data.masked_positions): no training epoch's.
VAL_EPOCH = 0xFFFFFFFF


def _val_loss(run: Run) -> float:
    """The loss over the validation data with the current parameters: the mean over its examples of each
    one's loss, as the objective is the batch's mean (with --loss-reduction mean, over the tokens the loss
    scores). Under torchrun the ranks share the batches (_val_sums) and add their sums, so the data is gone
    through once in all, not once on every rank."""
    group = getattr(run.runtime, "group", None) or Group()
    total, count = group.add(_val_sums(run, group.rank, group.world))
    return total / max(count, 1.0)


def _val_sums(run: Run, rank: int, world: int) -> tuple[float, float]:
    """The summed loss and the number of examples of every world-th validation batch from the rank-th: the
    batches in order, ETraining's masks drawn as for the epoch VAL_EPOCH (by the batch's index, so a batch
    has its draws whichever rank computes it). It runs on the numpy interpreter (ir/interpreter.py), the
    reference every backend's step is checked against, and changes no parameter or optimizer state."""
    from pseudoformer.ir.interpreter import run as interpret

    weights = _weights(run, run.runtime.current())  # on every rank: gathering FSDP2's shards takes all of them
    total, count = 0.0, 0
    for i, batch in enumerate(datasets.batches(run.val, run.opts.batch_size, run.opts.seed, 0, shuffle=False)):
        if i % world != rank:
            continue
        feeds = _feeds(run.plan, run.model, batch, (run.opts.seed, VAL_EPOCH, i), expectation=True)
        losses = np.asarray(next(iter(interpret(run.model.graph, feeds, weights).values())), np.float64)
        total += float(losses.sum()) if losses.ndim else float(losses) * len(next(iter(feeds.values())))
        scored = _scored(run, feeds)
        count += len(next(iter(feeds.values()))) if scored is None else scored
    return total, float(count)


def _where(run: Run, done: int) -> tuple[int, int]:
    """The (epoch, batch index) of the step after `done` steps: where a resumed run goes on."""
    per_epoch = math.ceil((len(next(iter(run.rows.values()))) if isinstance(run.rows, dict) else len(run.rows))
                          / run.step_rows)
    return divmod(done, per_epoch)


def _stop(step: int, loss: float, outdir: Path | None) -> None:
    kept = f"; the last good checkpoint is in {outdir}" if outdir is not None and (outdir / "model.safetensors"
                                                                                   ).exists() else ""
    raise TrainingStopped(f"the loss became {loss} at step {step}: training stopped (lower --lr, or clip the "
                          f"gradient with --clip){kept}")


def _weights(run: Run, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every parameter, in the model's order: the trained ones from `values` (the runtime's), the rest the
    model's."""
    out = {k: values[k] if k in values else run.model.weights[k] for k in run.names or run.model.weights}
    for unemb, emb in run.step.ties.items():
        out[unemb] = np.ascontiguousarray(out[emb].T)
    return out


def _save(run: Run, history: list[Row], done: int) -> None:
    """The checkpoint, the optimizer state, the loss curve and training.json (with what --resume reads),
    streamed from the runtime's current() values (its own buffers, where it keeps them on the host)."""
    model, step, runtime, outdir = run.model, run.step, run.runtime, run.outdir
    assert outdir is not None
    # on every rank of a process group: gathering FSDP2's shards takes all of them
    values = runtime.current()
    weights = _weights(run, values)
    bad = [k for k, v in weights.items() if not np.isfinite(np.asarray(v, np.float32)).all()]
    if bad:  # a step whose loss was finite can still leave ±∞ or NaN in θ: never written over a good checkpoint
        kept = f"; the last good checkpoint is in {outdir}" if (outdir / "model.safetensors").exists() else ""
        raise TrainingStopped(f"the parameters became non-finite by step {done} ({', '.join(bad[:3])}"
                              f"{', …' if len(bad) > 3 else ''}): training stopped (lower --lr, or clip the gradient "
                              f"with --clip){kept}")
    if not getattr(runtime, "writes", True):  # under torchrun, rank 0 alone writes
        return
    state = {k: v for k, v in values.items() if k.startswith(("m.", "v.", STATE_PREFIX)) or k == STEP}
    epoch, index = _where(run, done)
    with run_folder.generation(outdir, done) as gen:  # all of these, or none: the previous checkpoint stays
        save_checkpoint(gen, weights, *run.hf)
        if state:
            from pseudoformer.weights.safetensors_io import save_weights

            save_weights(state, gen / "optimizer.safetensors")
        write_loss_curve(gen, history)
        write_meta(gen, {"source": str(model.source), "steps": done, "trainable": step.trainable,
                         "ties": step.ties, "last_loss": history[-1][1] if history else None,
                         "data_position": {"epoch": epoch, "batch": index, "shuffle": run.shuffle},
                         "hf_source": str(run.hf[0]) if run.hf[0] is not None else None,
                         "weights_group": run.hf[1], "skipped_steps": run.skipped,
                         "options": _jsonable(asdict(run.opts)), "lr": run.lr, "total_steps": run.total,
                         # the sizes model.safetensors does not say, which --resume reads back
                         "hyperparameters": dict(model.config.hyperparameters)})


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
