"""The Python API for models: load a .alg model with its config and weights, check it, run it on the interpreter."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from pseudoformer.base.errors import AlgError, CompileError, UsageError
from pseudoformer.base.limits import MAX_NODES
from pseudoformer.checkpoint_group import checkpoint_group
from pseudoformer.config import Config, resolve
from pseudoformer.frontend.ast import Algorithm, callees, is_training
from pseudoformer.frontend.entry import elaborate, find_entry
from pseudoformer.frontend.generation_plan import GenerationPlan
from pseudoformer.frontend.inference import (
    check_plan_config,
    describe_plan,
    inference_hyperparameters,
    is_inference,
    plan_inference,
)
from pseudoformer.frontend.modules import load_program
from pseudoformer.frontend.training import plan_training, training_hyperparameters
from pseudoformer.frontend.training_plan import TrainingPlan, describe_training
from pseudoformer.inputs import check_inputs, token_bounds
from pseudoformer.ir import Graph
from pseudoformer.model_checks import check_finite, check_memory
from pseudoformer.run_settings import check_max_nodes, check_seed
from pseudoformer.tied_weights import tie
from pseudoformer.version import __version__
from pseudoformer.weights import WeightsError, load_weights, open_checkpoint, open_weights, random_weights


def packaged_models() -> Path:
    return Path(str(resources.files("pseudoformer.models")))


def resolve_source(path: str | Path) -> Path:
    """A .alg path, or the name of a packaged model (`gpt2`, `bert`, `paper/primitives`)."""
    p = Path(path)
    if p.exists():
        return p
    for candidate in (packaged_models() / p, packaged_models() / f"{p}.alg"):
        if candidate.is_file():
            return candidate
    raise UsageError(f"no such file: {path}")


@dataclass
class Model:
    """A checked, elaborated model with its weights, ready to run or to hand to a backend."""

    graph: Graph
    weights: dict[str, np.ndarray]
    source: Path
    config: Config
    weights_source: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # A training algorithm's plan (Algorithms 11–13; frontend/training_plan.py): then `graph` is its loss
    # graph, the loss of each example, float32 [batch]. None for a model.
    training: TrainingPlan | None = None

    @property
    def entry(self) -> str:
        return str(self.graph.meta["entry"])

    @property
    def input_names(self) -> list[str]:
        return [n.attrs["name"] for n in self.graph.inputs]

    @property
    def output_names(self) -> list[str]:
        return [name for name, _ in self.graph.outputs]

    def _repr_html_(self) -> str:
        """In a notebook: the graph viewer (pseudoformer.viewer), at -O0 with the passes of -O2."""
        from pseudoformer.viewer import notebook_html

        return notebook_html(self.graph, 0)

    def run(self, inputs: Mapping[str, Any] | None = None, **named: Any) -> dict[str, np.ndarray]:
        """Run on the numpy reference interpreter: `model.run(x=tokens)`."""
        from pseudoformer.ir.interpreter import run

        return run(self.graph, check_inputs(self.graph, {**(inputs or {}), **named}), self.weights)


def load(path: str | Path, *, entry: str | None = None, config: str | Path | None = None,
         defines: list[str] | None = None, weights: str | Path | None = None, seed: int = 0,
         include: Sequence[str | Path] = (), max_nodes: int = MAX_NODES, allow_nonfinite: bool = False,
         bind_weights: bool = True, lazy_weights: bool = False, source: str | None = None,
         default_config: Path | None = None, draws: bool = False,
         recorded: Mapping[str, int | float] | None = None) -> Model:
    """Parse, check and elaborate `path`; bind weights from a checkpoint or a seeded random init.
    `draws`: the model's random draws (dropout) as inputs a trainer fills, not their expectations
    (frontend/draws.py).

    `bind_weights=False` gives the graph alone (`weights` empty): what `inspect` shows has no
    weights, and drawing or reading them cost seconds and the parameters' bytes (GPT-2 at 48 layers:
    1.7 GB) for nothing. Nothing is read from a `weights` checkpoint but its config.json.

    `lazy_weights=True` binds a checkpoint's parameters as LazyTensors (ir/lazy_tensor.py), each read
    from the file when a writer loads it: a compile that writes them once then holds one tensor at a
    time, never the whole model (finiteness is checked as each is read).

    `include`: directories a `use` may read besides the entry's own and the installed models/.
    `source`: the text of `path` when it is made, not read (a training algorithm derived from a model's
    kind, pseudoformer/training/derive.py); `default_config`: the config to read when `path` has none beside
    it (that model's own).
    `recorded`: the hyperparameters a training run recorded (its training.json, which `train --resume` reads):
    taken as a checkpoint's config.json's are, over the config file and under `defines`, for weights whose file
    says no sizes (the run's model.safetensors).
    `max_nodes`: the most IR nodes the graph may have. Parameters that do not fit in the memory
    available are refused before they are allocated, and weights holding NaN or ±∞ unless
    `allow_nonfinite`.
    """
    check_seed(seed)
    check_max_nodes(max_nodes)
    src = resolve_source(path) if source is None else Path(path)
    hf = None
    hf_config: dict[str, Any] = {}
    hf_note = ""
    wpath = Path(weights) if weights is not None else None
    if wpath is not None:
        # What the path is (a HF directory, a GGUF file read as one, a safetensors file) is the checkpoint's to say.
        try:
            checkpoint = open_checkpoint(wpath)
            hf = checkpoint.hyperparameters()
        except WeightsError as e:
            raise UsageError(str(e)) from None
        if hf is not None:
            hf_config, hf_note = checkpoint.config() or {}, checkpoint.describe()
    cfg = resolve(src, config, defines, hf if hf is not None else dict(recorded or {}), default_config)
    prog = load_program(src, source, include=include)
    # τ and ℓ_gen of the file's DInference may be set beside its model's sizes: not unknown to the model.
    cfg.optional |= inference_hyperparameters(prog) | training_hyperparameters(prog)
    cfg.entry = _config_entry(prog, cfg.entry)
    try:
        graph = elaborate(prog, entry or cfg.entry, cfg.hyperparameters, optional=cfg.optional, max_nodes=max_nodes,
                          draws=draws)
    except CompileError as e:
        # A checkpoint of another model (GPT-2's config.json under bert.alg) fills in some sizes
        # and not others, and the mix fails to shape-check in the source. Blame the checkpoint,
        # not the source, when the source elaborates without it.
        if hf is None or not _elaborates(prog, src, entry, config, defines, default_config):
            raise
        raise UsageError(f"{hf_note}, and its config.json does not fit {src.name}: {e.errors[0].message}") from None
    if not bind_weights:
        return Model(graph, {}, src, cfg, str(wpath) if wpath else None, meta={"seed": seed, "unbound": True})
    expected = {p.attrs["name"]: (tuple(int(d) for d in p.type.shape), "float32") for p in graph.params()}
    check_memory(graph, expected, streaming=lazy_weights and wpath is not None)
    if wpath is not None:
        # An entry that wraps the model (`θ : GPT2`) takes the model's checkpoint into that group.
        group = checkpoint_group(prog, entry or cfg.entry, hf_config if hf is not None else None)
        if group is not None and hf_note:
            hf_note += f", mapped onto the parameter group {group}"
        twins = None
        try:
            if lazy_weights:
                params, twins = open_weights(checkpoint, expected, group=group)
            else:
                params = load_weights(checkpoint, expected, group=group)
        except WeightsError as e:
            if hf_note:  # name the checkpoint's kind: a misfit list alone reads like a corrupt file
                e.summary += f" ({hf_note})"
            raise UsageError(str(e)) from None
        if not allow_nonfinite:
            params = check_finite(params, wpath)
        # A tied unembedding (W_u = W_eᵀ) read as W_e's transpose: held and stored once (tied_weights.py).
        graph, params = tie(graph, params, twins)
    else:
        group, params = None, random_weights(expected, seed=seed)
    alg = find_entry(prog, entry or cfg.entry)
    plan = plan_training(prog, alg) if is_training(alg) else None
    # The group the checkpoint filled: training writes the trained group back as that checkpoint.
    meta: dict[str, Any] = {"seed": seed, **({"weights_group": group} if group else {})}
    return Model(graph, params, src, cfg, str(wpath) if wpath else None, meta=meta, training=plan)


def _config_entry(prog: Any, named: str | None) -> str | None:
    """The config's entry, unless it is a model's config applied to a training algorithm over that model
    (gpt2.toml, entry GPT2, for gpt2_dtraining.alg): a file that defines a training algorithm but not the
    algorithm the config names takes its own default entry."""
    own = prog.entries()
    if named is None or not any(is_training(a) for a in own):
        return named
    return named if any(named in (a.name, a.label, f"Algorithm {a.label}") for a in own) else None


def _elaborates(prog: Any, src: Path, entry: str | None, config: str | Path | None,
                defines: list[str] | None, default_config: Path | None) -> bool:
    cfg = resolve(src, config, defines, fallback=default_config)
    try:
        elaborate(prog, entry or _config_entry(prog, cfg.entry), cfg.hyperparameters,
                  optional=cfg.optional | inference_hyperparameters(prog) | training_hyperparameters(prog))
    except CompileError:
        return False
    return True


@dataclass
class CheckReport:
    """What `check` found: the algorithms checked, and the plan of each inference and training algorithm
    among them."""

    checked: list[str]
    plans: list[GenerationPlan] = field(default_factory=list)
    training: list[TrainingPlan] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)  # one line per plan, as `pseudoformer check` prints it


def check(path: str | Path, *, entry: str | None = None, config: str | Path | None = None,
          defines: list[str] | None = None, include: Sequence[str | Path] = (),
          max_nodes: int = MAX_NODES) -> list[str]:
    """Check a file: parse, resolve names, and infer shapes of every algorithm it defines.

    With a config (the model's own, --config or -D) each entry is elaborated at those sizes; without
    one, hyperparameters stay symbols. Returns the names of the algorithms checked.
    """
    return check_report(path, entry=entry, config=config, defines=defines, include=include,
                        max_nodes=max_nodes).checked


def _check_modes(algs: Sequence[Algorithm], named: str | None,
                 values: Mapping[str, Any]) -> dict[int, tuple[Mapping[str, Any], bool]]:
    """How `check` elaborates each algorithm: (the values it gets, whether sizes without one stay symbols).

    The entry (the one the config or --entry names, else each algorithm no other one calls) gets the
    config's values, all needed. A helper, called by another algorithm, is checked on its own with
    symbolic sizes (its values come from its callers, which elaborate it in their context). Another
    algorithm of the file that nothing calls (BERTEncoder beside BERT) gets the values it shares with
    the config, and symbols for the rest. So does the model an inference algorithm samples from (GPT2 under
    DInference), which only the inference algorithm calls: the sampler is checked line by line, not elaborated,
    so without this the config's values would reach no elaboration (`-D d_e=0` checked ok)."""
    called = set().union(*(callees(a) for a in algs))
    by_models = set().union(*(callees(a) for a in algs if not is_inference(a)))
    modes: dict[int, tuple[Mapping[str, Any], bool]] = {}
    for a in algs:
        if named is not None and named in (a.name, a.label, f"Algorithm {a.label}") \
                or named is None and a.name not in called:
            modes[id(a)] = (values, not values)
        elif a.name in called and a.name not in by_models and not is_inference(a):
            modes[id(a)] = (values, True)
        elif a.name in called:
            modes[id(a)] = ({}, True)
        else:
            modes[id(a)] = (values, True)
    return modes


def check_report(path: str | Path, *, entry: str | None = None, config: str | Path | None = None,
                 defines: list[str] | None = None, include: Sequence[str | Path] = (),
                 max_nodes: int = MAX_NODES) -> CheckReport:
    """`check`, with the generation plan of each inference algorithm (Algorithms 14, 15) it checked:
    those are checked line by line (frontend/inference.py), not elaborated."""
    check_max_nodes(max_nodes)
    src = resolve_source(path)
    cfg = resolve(src, config, defines)
    prog = load_program(src, include=include)
    algs = prog.entries()
    if not algs:
        find_entry(prog, entry)  # the file's own mistake: it defines nothing
    errors: list[AlgError] = []
    report = CheckReport([])
    modes = _check_modes(algs, entry or cfg.entry, cfg.hyperparameters)
    for a in algs:
        ident = a.name if sum(b.name == a.name for b in algs) == 1 else f"Algorithm {a.label}"
        if entry is not None and entry not in (a.name, a.label, f"Algorithm {a.label}"):
            continue
        values, symbolic = modes[id(a)]
        try:
            if is_inference(a):
                plan = plan_inference(prog, ident)
                bad = check_plan_config(prog, plan, cfg.hyperparameters)
                if bad:
                    raise CompileError(bad)
                report.plans.append(plan)
                report.summaries.append(describe_plan(prog, plan, cfg.hyperparameters))
            else:
                # A training algorithm elaborates its loss graph; its plan is checked on the way.
                elaborate(prog, ident, dict(values), symbolic=symbolic, optional=set(values), max_nodes=max_nodes)
                if is_training(a):
                    tplan = plan_training(prog, a)
                    report.training.append(tplan)
                    report.summaries.append(describe_training(prog, tplan, cfg.hyperparameters))
            report.checked.append(ident)
        except CompileError as e:
            errors.extend(e.errors)
    if errors:
        # A helper's mistake is found by its own symbolic check and again by each entry that calls it:
        # one message per place, the first (symbolic, in definition order) kept.
        places: dict[object, AlgError] = {}
        for e in errors:
            places.setdefault((e.pos.file, e.pos.line, e.pos.col) if e.pos else id(e), e)
        raise CompileError(list(places.values()))
    if entry is not None and not report.checked:
        raise UsageError(f"{src} has no algorithm {entry!r}")
    return report


def model_metadata(model: Model, opt_level: int) -> dict[str, str]:
    """What a compiled artefact records about where it came from (ONNX metadata_props, TVM's .so)."""
    return {
        "source": model.source.name,
        "source_sha256": hashlib.sha256(model.source.read_bytes()).hexdigest(),
        "entry": model.entry,
        "hyperparameters": json.dumps(model.graph.meta.get("hyperparameters", {}), sort_keys=True),
        "weights": model.weights_source or f"random (seed {model.meta.get('seed', 0)})",
        "pseudoformer_version": __version__,
        "opt_level": str(opt_level),
        # The tables token inputs index, so `run model.onnx` refuses an id out of range as `run model.alg`
        # does (ONNX Gather takes a negative index from the end).
        "token_bounds": json.dumps(token_bounds(model.graph), sort_keys=True),
    }
