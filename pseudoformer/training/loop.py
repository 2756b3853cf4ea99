"""`pseudoformer.train`: load a loss algorithm (or a training algorithm, whose plan the frontend made),
compile its training step for a backend, and run it over the data: a tqdm bar (step, loss, tokens/s),
a step size schedule, checkpoints every --save-every steps and at the end, the loss curve.

A NaN or infinite loss stops training with a message naming the step, after the last good checkpoint
was kept (the bad step's update is never saved); Ctrl-C saves a checkpoint of the last finished step
and returns cleanly.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pseudoformer.base.errors import UsageError
from pseudoformer.inputs import check_size, token_bounds
from pseudoformer.ir.block_coded import plain_weights
from pseudoformer.model import Model, load
from pseudoformer.passes.training_step import STEP, Optimizer
from pseudoformer.training import data as datasets
from pseudoformer.training.compile import CompiledStep, compile_step, tied_unembedding
from pseudoformer.training.outputs import save_checkpoint, write_loss_curve, write_meta
from pseudoformer.training.runtimes import make_runtime

if TYPE_CHECKING:
    from pseudoformer.backends.options import CompileOptions

# The training step's runtime (training/runtimes.py) on each backend --backend names.
_STEP_RUNTIMES = {"numpy": "interpreter", "onnx": "onnxruntime", "tvm": "tvm"}


class TrainingStopped(UsageError):
    """Training cannot go on (a loss that is not finite); the last good checkpoint is kept."""


@dataclass
class TrainResult:
    losses: list[float]
    weights: dict[str, np.ndarray]  # every parameter after the last finished step
    steps: int
    interrupted: bool = False
    out: Path | None = None
    history: list[tuple[int, float, float]] = field(default_factory=list)  # (step, loss, tokens/s)


def step_size(step: int, lr: float, warmup: int, total: int, schedule: str) -> float:
    """η at step (from 1): constant, or linear warm-up over `warmup` steps then cosine decay to 0 at `total`."""
    if schedule == "constant":
        return lr
    if warmup and step <= warmup:
        return lr * step / warmup
    span = max(total - warmup, 1)
    return lr * 0.5 * (1 + math.cos(math.pi * min(step - warmup, span) / span))


def _load(source: str | Path, weights: str | Path | None, seed: int, **kw: Any) -> tuple[Model, Path | None, str | None]:
    """The loss model with its weights, the HF checkpoint directory they came from (if one), and the
    parameter group that checkpoint filled (``theta`` for a loss algorithm over ``θ : GPT2``; load places it)."""
    model = load(source, weights=weights, seed=seed, **kw)
    wdir = Path(weights) if weights is not None and Path(weights).is_dir() else None
    return model, wdir, model.meta.get("weights_group")


def _plan_settings(model: Model) -> dict[str, Any]:
    """What a training algorithm's plan (frontend/training_plan.py) says: η, N_epochs, the loss's inputs."""
    plan = getattr(model, "training", None)
    if plan is None:
        return {}
    hp = model.config.hyperparameters
    return {"lr": hp.get(plan.learning_rate), "epochs": hp.get(plan.epochs), "plan": plan}


def _feeds(plan: Any, model: Model, rows: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The loss graph's inputs for a batch of sequences: the tokens, ETraining's masked copy, or
    EDTraining's pairs (a dict by the dataset's member names, z and x)."""
    # The data stays in its file's integer type (data.read_tokens); each batch is widened as it is fed.
    rows = {k: np.asarray(a, np.int64) for k, a in rows.items()} if isinstance(rows, dict) else np.asarray(rows, np.int64)
    if plan is None:
        return {model.input_names[0]: rows}
    if isinstance(rows, dict):
        return {i: rows[d] for i, d in zip(plan.loss_inputs, plan.data, strict=True)}
    if plan.masking is not None:
        m, hp = plan.masking, model.config.hyperparameters
        token = m.mask_token if isinstance(m.mask_token, int) else int(hp[m.mask_token])
        hide = rng.random(rows.shape) < float(hp[m.probability])
        return {m.masked_input: np.where(hide, token, rows), m.target_input: rows,
                m.positions_input: hide.astype(np.float32)}
    return {plan.loss_inputs[0]: rows}


def _check_lengths(model: Model, plan: Any, rows: np.ndarray | dict[str, np.ndarray]) -> None:
    """Each sequence fits the positions of the input it feeds (ℓ_max of a position table, else --max-seq-len),
    said before the step is compiled: past them a lookup would index beyond its table inside a step."""
    if isinstance(rows, dict):
        fed = {i: rows[d] for i, d in zip(plan.loss_inputs, plan.data, strict=True)}
    else:
        fed = {i: rows for i in ([model.input_names[0]] if plan is None else plan.loss_inputs)}
    for name, a in fed.items():
        dim = model.graph.input(name).shape[-1]
        if isinstance(dim, str):
            check_size(model.graph, dim, a.shape[-1], f"a sequence of the data for {name} (--seq-len, or the "
                       "pairs' length)")


def _pairs(plan: Any) -> bool:
    """Whether the training algorithm's dataset is pairs (EDTraining's (z_n, x_n))."""
    return plan is not None and plan.masking is None and len(plan.data) > 1


def train(source: str | Path, data: str | Path | np.ndarray | dict[str, np.ndarray], *, entry: str | None = None,
          config: str | Path | None = None, defines: Sequence[str] | None = None, weights: str | Path | None = None,
          seed: int = 0, tokenizer: str | Path | None = None, seq_len: int = 128, batch_size: int = 8,
          epochs: int | None = None, steps: int | None = None, lr: float | None = None, optimizer: str | None = None,
          warmup: int = 0, schedule: str | None = None, clip: float = 0.0, weight_decay: float = 0.01,
          trainable: Sequence[str] | None = None, save_every: int = 0, out: str | Path | None = None,
          progress: bool = True, arena: bool = True, options: CompileOptions | None = None,
          **keywords: Any) -> TrainResult:
    """Train the parameters of a loss algorithm's model (see the module's docstring); returns the losses and
    the trained weights. `trainable`: the parameter names to train (the rest frozen); all by default.
    `arena=False`: onnxruntime frees each tensor after its last use instead of keeping its arena (slower).
    How the step is compiled and run: `options` (a CompileOptions) or keywords naming its fields: backend
    ("onnx", the default; "tvm"; "numpy", the reference interpreter), opt_level (2), threads, provider."""
    from pseudoformer.compile_options import from_keywords

    options = from_keywords(options, keywords, "train", opt_level=2).runnable("train")
    backend, level, threads = _STEP_RUNTIMES[options.backend], options.opt_level, options.threads
    if not arena and backend != "onnxruntime":
        raise UsageError(f"--no-arena is about onnxruntime's memory arena: it does not apply to the "
                         f"{options.backend} backend")
    model, hf_dir, group = _load(source, weights, seed, entry=entry, config=config, defines=list(defines or []))
    settings = _plan_settings(model)
    lr = lr if lr is not None else settings.get("lr")
    if lr is None or not lr > 0 or not math.isfinite(lr):
        raise UsageError(f"--lr must be a number > 0, got {lr}" if lr is not None else "give a step size: --lr ETA")
    epochs = epochs if epochs is not None else int(settings.get("epochs") or 1)
    if epochs < 1 or (steps is not None and steps < 1):
        raise UsageError("--epochs and --steps must be at least 1")
    opt = Optimizer(optimizer or ("sgd" if "plan" in settings else "adamw"), clip=clip, weight_decay=weight_decay)
    loss_name = settings["plan"].loss_output if "plan" in settings else None
    bounds = token_bounds(model.graph)
    plan = settings.get("plan")
    rows: np.ndarray | dict[str, np.ndarray]
    if _pairs(plan):  # one example a row, the lengths the file's (--seq-len and --tokenizer do not apply)
        if isinstance(data, np.ndarray):
            raise UsageError(f"{plan.algorithm} trains on pairs ({', '.join(plan.data)}): give a .npz file or a "
                             "dict of arrays, not one array")
        by_data = {d: bounds[i] for i, d in zip(plan.loss_inputs, plan.data, strict=True) if i in bounds}
        rows = datasets.read_pairs(data, plan.data, by_data)
    else:
        if isinstance(data, dict):
            raise UsageError("a dict of arrays is data for a training algorithm over pairs (EDTraining); this "
                             "model reads one token stream")
        ids = data if isinstance(data, np.ndarray) else datasets.read_tokens(data, tokenizer)
        rows = datasets.sequences(np.asarray(ids).reshape(-1), seq_len,
                                  min(bounds.values()) if bounds else None,
                                  str(data) if not isinstance(data, np.ndarray) else "the data")
    _check_lengths(model, plan, rows)
    examples = len(next(iter(rows.values()))) if isinstance(rows, dict) else len(rows)
    per_epoch = math.ceil(examples / batch_size)
    total = steps if steps is not None else per_epoch * epochs
    ties = tied_unembedding(model.graph, _tied(hf_dir))
    # Trained from a GGUF file's Q4_0/Q8_0 weights, the step computes with their values: the blocks they carry
    # would make its compile keep frozen matrices as MatMulNBits (ir/block_coded.py), another computation.
    step = compile_step(model.graph, plain_weights(model.weights), train=trainable, optimizer=opt, level=level,
                        ties=ties)
    if loss_name is not None and step.graph.outputs[0][0] != "loss":
        raise UsageError(f"the loss output {loss_name!r} was not found")
    session: dict[str, Any] = {"threads": threads, "provider": options.provider} if backend == "onnxruntime" else {}
    if not arena:
        session["session"] = {"enable_cpu_mem_arena": False}
    runtime = make_runtime(backend, step.graph, step.frozen, step.state, split=step.split, **session)
    outdir = Path(out) if out is not None else None
    sched = schedule or ("cosine" if opt.kind == "adamw" and warmup else "constant")
    return _loop(model, step, runtime, rows, batch_size, total, lr, warmup, sched, seed, save_every, outdir,
                 (hf_dir, group), progress, settings.get("plan"))


def _tied(hf_dir: Path | None) -> bool:
    if hf_dir is None:
        return False
    from pseudoformer.weights.hf_checkpoint import read_hf_config

    return bool(read_hf_config(hf_dir).get("tie_word_embeddings", False))


def _loop(model: Model, step: CompiledStep, runtime: Any, rows: Any, batch_size: int, total: int,
          lr: float, warmup: int, schedule: str, seed: int, save_every: int, outdir: Path | None,
          hf: tuple[Path | None, str | None], progress: bool, plan: Any) -> TrainResult:
    from tqdm import tqdm

    rng = np.random.default_rng(seed)
    history: list[tuple[int, float, float]] = []
    interrupted = [False]

    def on_sigint(signum: int, frame: Any) -> None:
        interrupted[0] = True

    previous = signal.signal(signal.SIGINT, on_sigint)
    bar = tqdm(total=total, desc="train", unit="step", disable=not progress, dynamic_ncols=True)
    done, epoch = 0, 0
    try:
        while done < total and not interrupted[0]:
            for batch in datasets.batches(rows, batch_size, seed, epoch):
                if done >= total or interrupted[0]:
                    break
                t0 = time.perf_counter()
                eta = step_size(done + 1, lr, warmup, total, schedule)
                loss = runtime.step(_feeds(plan, model, batch, rng), eta)
                if not math.isfinite(loss):
                    _stop(done + 1, loss, outdir)
                done += 1
                rate = datasets.token_count(batch) / (time.perf_counter() - t0)
                history.append((done, loss, rate))
                bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{rate:,.0f}")
                bar.update(1)
                if outdir is not None and save_every and done % save_every == 0:
                    _save(model, step, runtime, outdir, hf, history)
            epoch += 1
    finally:
        bar.close()
        signal.signal(signal.SIGINT, previous)
    result = TrainResult([h[1] for h in history], _weights(model, step, runtime), done, interrupted[0], outdir,
                         history)
    if outdir is not None:
        _save(model, step, runtime, outdir, hf, history)
    return result


def _stop(step: int, loss: float, outdir: Path | None) -> None:
    kept = f"; the last good checkpoint is in {outdir}" if outdir is not None and (outdir / "model.safetensors"
                                                                                   ).exists() else ""
    raise TrainingStopped(f"the loss became {loss} at step {step}: training stopped (lower --lr, or clip the "
                          f"gradient with --clip){kept}")


def _weights(model: Model, step: CompiledStep, runtime: Any) -> dict[str, np.ndarray]:
    values = runtime.values()
    out = {k: values.get(k, v) for k, v in model.weights.items()}
    for unemb, emb in step.ties.items():
        out[unemb] = np.ascontiguousarray(out[emb].T)
    return out


def _save(model: Model, step: CompiledStep, runtime: Any, outdir: Path, hf: tuple[Path | None, str | None],
          history: list[tuple[int, float, float]]) -> None:
    weights = _weights(model, step, runtime)
    save_checkpoint(outdir, weights, *hf)
    values = runtime.values()
    state = {k: v for k, v in values.items() if k.startswith(("m.", "v.")) or k == STEP}
    if state:
        from pseudoformer.weights.safetensors_io import save_weights

        save_weights(state, outdir / "optimizer.safetensors")
    write_loss_curve(outdir, history)
    write_meta(outdir, {"source": str(model.source), "steps": len(history), "trainable": step.trainable,
                        "ties": step.ties, "last_loss": history[-1][1] if history else None})
