"""`pseudoformer.train`: load a loss algorithm (or a training algorithm, whose plan the frontend made, or one
derived from the model's kind), read its data, compile its training step for a backend (or resume a run), and
hand the run to training/steps.py, which runs the steps, the progress, the validation loss and the checkpoints.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pseudoformer.base.errors import CompileError, UsageError
from pseudoformer.base.limits import MAX_NODES
from pseudoformer.config import resolve
from pseudoformer.inputs import check_size, token_bounds
from pseudoformer.ir.block_coded import plain_weights
from pseudoformer.model import Model, load, resolve_source
from pseudoformer.passes.training_step import Optimizer
from pseudoformer.training import data as datasets
from pseudoformer.training.accumulate import make_accumulating
from pseudoformer.training.compile import compile_step, tied_unembedding
from pseudoformer.training.derive import training_source
from pseudoformer.training.init import INITS, gpt2_init
from pseudoformer.training.options import TrainingOptions
from pseudoformer.training.precision import refuse
from pseudoformer.training.resume import read_resume, restore_state, unrecorded
from pseudoformer.training.runtimes import make_runtime
from pseudoformer.training.steps import Run, TrainResult, run_steps
from pseudoformer.weights import open_checkpoint

if TYPE_CHECKING:
    from pseudoformer.backends.options import CompileOptions

# The training step's runtime (training/runtimes.py) on each backend --backend names.
# The step counter t is a float32 input of the step graph (passes/training_step.py): whole numbers are exact to 2²⁴.
MAX_STEPS = 2**24
_STEP_RUNTIMES = {"numpy": "interpreter", "onnx": "onnxruntime", "tvm": "tvm", "torch": "torch"}


def _load(source: str | Path, weights: str | Path | None, seed: int, text: str | None = None,
          **kw: Any) -> tuple[Model, Path | None, str | None]:
    """The loss model with its weights, the HF checkpoint directory they came from (if one), and the
    parameter group that checkpoint filled (``theta`` for a loss algorithm over ``θ : GPT2``; load places it).
    `text`: the source of a training algorithm derived from a model's kind (derive.py), read as `source`."""
    model = load(source, weights=weights, seed=seed, source=text, draws=True, **kw)
    wdir = open_checkpoint(weights).directory if weights is not None else None  # a HF directory, to export as one
    return model, wdir, model.meta.get("weights_group")


def _plan_settings(model: Model) -> dict[str, Any]:
    """What a training algorithm's plan (frontend/training_plan.py) says: η, N_epochs, the loss's inputs."""
    plan = getattr(model, "training", None)
    if plan is None:
        return {}
    hp = model.config.hyperparameters
    return {"lr": hp.get(plan.learning_rate), "epochs": hp.get(plan.epochs), "plan": plan}


def _masking_set(plan: Any, model: Model) -> None:
    """ETraining's p_mask and mask_token have values (the loss graph does not read them: the host draws)."""
    if plan is None or plan.masking is None:
        return
    m, hp = plan.masking, model.config.hyperparameters
    missing = [k for k in (m.probability, m.mask_token) if isinstance(k, str) and k not in hp]
    if missing:
        raise UsageError(f"{plan.algorithm} masks tokens: set {' and '.join(missing)} in its config or with "
                         + " ".join(f"-D {k}=…" for k in missing) + " (BERT's: p_mask = 0.15, its [MASK] id)")


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
          betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
          decay_all: bool = False, shuffle: bool | None = None, objective: str | None = None,
          resume: str | Path | None = None, log_every: int = 10,
          val_data: str | Path | np.ndarray | dict[str, np.ndarray] | None = None, val_every: int = 100,
          init: str = "normal", fsdp: bool = False, precision: str = "fp32", grad_accum: int = 1,
          loss_reduction: str = "sum",
          hyperparameters: TrainingOptions | None = None, **keywords: Any) -> TrainResult:
    """Train the parameters of a loss algorithm's model (see the module's docstring); returns the losses and
    the trained weights. `trainable`: the parameter names to train (the rest frozen); all by default.
    `arena=False`: onnxruntime frees each tensor after its last use instead of keeping its arena (slower).
    How the step is compiled and run: `options` (a CompileOptions) or keywords naming its fields: backend
    ("onnx", the default; "tvm"; "numpy", the reference interpreter; "torch", torch.optim on a torch module:
    torch_loop.py, under torchrun on the process group with DDP, or FSDP2 if `fsdp`), opt_level (2), threads,
    provider, torch_compile (torch: the loss module under torch.compile). What it computes: the hyperparameters'
    keywords, a thin layer over `hyperparameters` (a TrainingOptions), which, given, replaces them."""
    from pseudoformer.compile_options import from_keywords

    compiled = from_keywords(options, keywords, "train", opt_level=2)
    hyper = hyperparameters or TrainingOptions(
        seq_len=seq_len, batch_size=batch_size, epochs=epochs, steps=steps, lr=lr, optimizer=optimizer,
        warmup=warmup, schedule=schedule, clip=clip, weight_decay=weight_decay, betas=tuple(betas),  # type: ignore[arg-type]
        eps=eps, decay_all=decay_all, shuffle=shuffle, seed=seed, save_every=save_every, precision=precision,
        grad_accum=grad_accum, loss_reduction=loss_reduction)
    return run_training(source, data, hyper, TrainingSetup(
        entry=entry, config=config, defines=tuple(defines or ()), weights=weights, tokenizer=tokenizer,
        trainable=tuple(trainable) if trainable is not None else None, out=out, progress=progress, arena=arena,
        compile=compiled, objective=objective, resume=resume, log_every=log_every, val_data=val_data,
        val_every=val_every, init=init, fsdp=fsdp))


@dataclass(frozen=True)
class TrainingSetup:
    """What is trained, from where, and how the step runs: everything of a run but its hyperparameters."""

    entry: str | None = None
    config: str | Path | None = None
    defines: tuple[str, ...] = ()
    weights: str | Path | None = None
    tokenizer: str | Path | None = None
    trainable: tuple[str, ...] | None = None
    out: str | Path | None = None
    progress: bool = True
    arena: bool = True
    compile: CompileOptions | None = None  # how the step is compiled and run (backend, -O, threads, provider)
    objective: str | None = None  # next-token or masked, for a model whose kind its file does not say
    resume: str | Path | None = None  # a run's -o DIR to go on from
    log_every: int = 10  # a plain progress line every N steps where stderr is no terminal
    val_data: str | Path | np.ndarray | dict[str, np.ndarray] | None = None  # held-out data, read as `data`
    val_every: int = 100  # the validation loss every N steps (and at the last)
    init: str = "normal"  # the parameters without --weights: normal or gpt2 (init.py)
    # How the model is loaded, as for every command (model.load): --include, --max-nodes, --allow-nonfinite
    include: tuple[str, ...] = ()
    max_nodes: int = MAX_NODES
    allow_nonfinite: bool = False
    fsdp: bool = False  # --backend torch under torchrun: FSDP2 (fully_shard per layer) instead of DDP


def run_training(source: str | Path, data: str | Path | np.ndarray | dict[str, np.ndarray],
                 opts: TrainingOptions, setup: TrainingSetup) -> TrainResult:
    """train() with its options as two values."""
    from pseudoformer.compile_options import from_keywords

    compiled = (setup.compile if setup.compile is not None else from_keywords(None, {}, "train", opt_level=2)
                ).runnable("train")
    backend, level, threads = _STEP_RUNTIMES[compiled.backend], compiled.opt_level, compiled.threads
    if not setup.arena and backend != "onnxruntime":
        raise UsageError(f"--no-arena is about onnxruntime's memory arena: it does not apply to the "
                         f"{compiled.backend} backend")
    if setup.fsdp and backend != "torch":
        raise UsageError("--fsdp shards the torch backend's model: use it with --backend torch under torchrun")
    refuse(opts.precision, compiled.backend, setup.fsdp)
    for flag, value in (("--log-every", setup.log_every), ("--val-every", setup.val_every)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{flag} must be a whole number ≥ 1, got {value!r}")
    resumed = read_resume(setup.resume) if setup.resume is not None else None
    if resumed is not None and setup.weights is not None:
        raise UsageError("--resume DIR starts from DIR's model.safetensors: drop --weights (the run's own "
                         "checkpoint is read for an HF export from training.json)")
    src = resolve_source(source)
    chosen = training_source(src, setup.entry, resolve(src, setup.config, list(setup.defines)).entry,
                             setup.objective)
    if chosen.note and setup.progress:
        print(f"note: {chosen.note}", file=sys.stderr)
    start_weights = resumed.weights if resumed is not None else setup.weights
    try:
        model, hf_dir, group = _load(chosen.path, start_weights, opts.seed, entry=chosen.entry, config=setup.config,
                                     defines=list(setup.defines), text=chosen.text,
                                     default_config=chosen.default_config, include=setup.include,
                                     max_nodes=setup.max_nodes, allow_nonfinite=setup.allow_nonfinite,
                                     recorded=resumed.hyperparameters if resumed is not None else None)
    except (UsageError, CompileError) as e:
        if resumed is None or resumed.hyperparameters is not None:
            raise
        raise unrecorded(resumed, setup.resume, e) from None
    if resumed is not None:
        hf_dir, group = resumed.hf_source, resumed.group
    if setup.init not in INITS:
        raise UsageError(f"--init {setup.init!r}: the inits are {', '.join(INITS)}")
    if setup.init != "normal":
        if start_weights is not None:
            raise UsageError(f"--init {setup.init} draws the parameters: it does not go with --weights or --resume")
        model.weights, scaled = gpt2_init(model.weights, opts.seed)
        if setup.progress:
            print(f"note: --init gpt2 scaled {len(scaled)} residual projections by 1/√(2L)", file=sys.stderr)
    settings = _plan_settings(model)
    plan = settings.get("plan")
    lr = opts.lr if opts.lr is not None else settings.get("lr")
    if lr is None and plan is not None:
        lr = DEFAULT_ETA
        if setup.progress:
            print(f"note: {plan.algorithm}'s η has no value: {DEFAULT_ETA:g} (set it with --lr ETA or -D "
                  f"{plan.learning_rate}=…)", file=sys.stderr)
    if lr is None:
        raise UsageError("give a step size: --lr ETA (a loss algorithm has no η of its own)")
    if not lr > 0 or not math.isfinite(lr):
        raise UsageError(f"η must be a number > 0, got {lr}: give --lr ETA")
    epochs = opts.epochs if opts.epochs is not None else int(settings.get("epochs") or 1)
    if epochs < 1:
        raise UsageError(f"N_epochs is {epochs}: give --epochs N (≥ 1)")
    kind = opts.optimizer or ("sgd" if plan is not None else "adamw")
    if kind == "sgd" and (opts.betas, opts.eps) != ((0.9, 0.999), 1e-8):
        raise UsageError("--betas and --eps set AdamW's constants; SGD has none (add --optimizer adamw)")
    opt = Optimizer(kind, beta1=opts.betas[0], beta2=opts.betas[1], eps=opts.eps, clip=opts.clip,
                    weight_decay=opts.weight_decay, decay_all=opts.decay_all)
    _masking_set(plan, model)
    bounds = token_bounds(model.graph)
    rows = _rows(plan, model, data, setup.tokenizer, opts.seq_len, bounds)
    val = None if setup.val_data is None else _rows(plan, model, setup.val_data, setup.tokenizer, opts.seq_len,
                                                     bounds)
    _check_lengths(model, plan, rows)
    if val is not None:
        _check_lengths(model, plan, val)
    if opts.loss_reduction == "mean" and plan is None:
        raise UsageError("--loss-reduction mean divides by the tokens a training algorithm's loss scores; a loss "
                         "algorithm's loss is what it writes: divide by ℓ − 1 in it (as tests/training/"
                         "gpt2_mean_loss.alg does)")
    examples = len(next(iter(rows.values()))) if isinstance(rows, dict) else len(rows)
    per_epoch = math.ceil(examples / (opts.batch_size * opts.grad_accum))
    total = opts.steps if opts.steps is not None else per_epoch * epochs
    if total > MAX_STEPS:
        raise UsageError(f"this run would take {total:,} steps: the step counts them in float32 (AdamW's t), which "
                         f"counts exactly to {MAX_STEPS:,}; give fewer --steps or --epochs")
    if resumed is not None and resumed.step_rows not in (None, opts.batch_size * opts.grad_accum):
        raise UsageError(f"--resume {setup.resume}: the run took {resumed.step_rows} examples a step (--batch-size "
                         "times --grad-accum), and its data position counts them: give the same product")
    if resumed is not None and resumed.steps >= total:
        raise UsageError(f"--resume {setup.resume}: the run is at step {resumed.steps}, and this one ends at step "
                         f"{total}: give more --steps or --epochs")
    # a resumed run reads W_u as it did, whether or not the checkpoint it started from is still there
    ties = tied_unembedding(model.graph, resumed.tied if resumed is not None and resumed.tied is not None
                            else _tied(hf_dir))
    # Trained from a GGUF file's Q4_0/Q8_0 weights, the step computes with their values: the blocks they carry
    # would make its compile keep frozen matrices as MatMulNBits (ir/block_coded.py), another computation.
    runtime: Any
    if backend == "torch":
        from pseudoformer.training.torch_loop import torch_step

        step, runtime = torch_step(model.graph, plain_weights(model.weights), setup.trainable, opt, level, ties,
                                   plan.loss_output if plan is not None else None, options=compiled,
                                   fsdp=setup.fsdp, precision=opts.precision)
        if resumed is not None:
            restore_state(step, resumed, setup.resume)
            runtime.load_state(step.state)
        setup = replace(setup, progress=setup.progress and runtime.writes)  # rank 0 alone reports and writes
        if compiled.torch_compile and setup.progress:
            from pseudoformer.training.torch_compile import NOTE

            print(f"note: {NOTE}", file=sys.stderr)
    else:
        weighted = opts.grad_accum > 1 or opts.loss_reduction == "mean"
        step = compile_step(model.graph, plain_weights(model.weights), train=setup.trainable, optimizer=opt,
                            level=level, ties=ties, accumulate=weighted)
        if plan is not None and step.graph.outputs[0][0] != "loss":
            raise UsageError(f"the loss output {plan.loss_output!r} was not found")
        if resumed is not None:
            restore_state(step, resumed, setup.resume)
        session: dict[str, Any] = ({"threads": threads, "provider": compiled.provider} if backend == "onnxruntime"
                                   else {})
        if not setup.arena:
            session["session"] = {"enable_cpu_mem_arena": False}
        runtime = (make_accumulating(backend, step.split, step.frozen, step.state, step.graph, **session) if weighted
                   else make_runtime(backend, step.graph, step.frozen, step.state, split=step.split, **session))
    # The runtime holds the trained parameters and their state from here on, in copies of its own: the loaded
    # arrays and the step's initial state are let go, so that the steps hold θ once, as torch does (the
    # checkpoint reads the trained ones back from the runtime: steps._weights).
    names, trained = list(model.weights), set(step.trainable)
    model.weights = {k: v for k, v in model.weights.items() if k not in trained}
    step.state = {}
    outdir = Path(setup.out) if setup.out is not None else None
    # A warm-up rises to η and the cosine takes it down, for either optimizer.
    sched = opts.schedule or ("cosine" if opts.warmup else "constant")
    shuffle = opts.shuffle if opts.shuffle is not None else plan is None
    run = Run(model, step, runtime, rows, plan, opts, total, lr, sched, shuffle, outdir, (hf_dir, group),
               setup, resumed.steps if resumed is not None else 0, resumed.history if resumed is not None else [],
               val, list(resumed.skipped) if resumed is not None else [], names)
    return run_steps(run)


# η of a training algorithm when neither its config, -D nor --lr gives one (the paper fixes none)
DEFAULT_ETA = 1e-4


def _rows(plan: Any, model: Model, data: Any, tokenizer: Any, seq_len: int,
          bounds: dict[str, int]) -> np.ndarray | dict[str, np.ndarray]:
    if _pairs(plan):  # one example a row, the lengths the file's (--seq-len and --tokenizer do not apply)
        if isinstance(data, np.ndarray):
            raise UsageError(f"{plan.algorithm} trains on pairs ({', '.join(plan.data)}): give a .npz file or a "
                             "dict of arrays, not one array")
        by_data = {d: bounds[i] for i, d in zip(plan.loss_inputs, plan.data, strict=True) if i in bounds}
        return datasets.read_pairs(data, plan.data, by_data)
    if isinstance(data, dict):
        raise UsageError("a dict of arrays is data for a training algorithm over pairs (EDTraining); this "
                         "model reads one token stream")
    ids = data if isinstance(data, np.ndarray) else datasets.read_tokens(data, tokenizer)
    return datasets.sequences(np.asarray(ids).reshape(-1), seq_len,
                              min(bounds.values()) if bounds else None,
                              str(data) if not isinstance(data, np.ndarray) else "the data")


def _tied(hf_dir: Path | None) -> bool:
    if hf_dir is None:
        return False
    from pseudoformer.weights.hf_checkpoint import read_hf_config

    return bool(read_hf_config(hf_dir).get("tie_word_embeddings", False))


