"""What `pseudoformer train FILE` trains: the file's own training algorithm, its loss algorithm, or, for a
model, the paper's training algorithm over it.

- A file that defines a training algorithm (the paper's 11–13) is trained through it (the last one),
  whatever its config's entry says (gpt2.toml names GPT2: the model's config, read for its sizes).
- A loss algorithm (its output a real number, `loss ∈ ℝ`) is trained as it is.
- A model (its output a matrix) is trained through the packaged training algorithm beside it
  (models/gpt2_dtraining.alg, models/bert_etraining.alg), or through one derived from the model's kind:
  Algorithm 13 (DTraining, next-token prediction) for a decoder, a model that the paper's DInference
  (Algorithm 14) samples from; Algorithm 12 (ETraining, masked tokens) for an encoder; Algorithm 11
  (EDTraining) for a model of two sequences (z, x). `--objective next-token|masked` says which where the
  model's kind does not. The derived text is the paper's, with the model's name in line 4 and, where the
  model returns logits rather than probabilities, their softmax (as gpt2_dtraining.alg writes it); it is
  read as a file beside the model (`<model>_dtraining.alg`), so errors point into it, and the model's own
  config gives its sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pseudoformer.base.errors import CompileError, UsageError
from pseudoformer.frontend.ast import Algorithm, is_inference, is_training
from pseudoformer.frontend.entry import find_entry
from pseudoformer.frontend.inference import plan_inference
from pseudoformer.frontend.modules import Program, load_program

# The paper's names and numbers: the file suffix, the algorithm's name and its number.
KINDS = {"next-token": ("dtraining", "DTraining", "13"), "masked": ("etraining", "ETraining", "12"),
         "pairs": ("edtraining", "EDTraining", "11")}
OBJECTIVES = ("next-token", "masked")


@dataclass(frozen=True)
class TrainingSource:
    """The file `train` loads, its text where it is derived, and the entry to take from it."""

    path: Path
    text: str | None  # the derived training algorithm, read as `path`; None: read `path` itself
    entry: str | None
    default_config: Path | None  # the model's own config, where the training file has none beside it
    note: str | None = None  # what was chosen, for the user (None: the file trains as written)


def training_source(path: Path, entry: str | None, config_entry: str | None,
                    objective: str | None = None) -> TrainingSource:
    """What to train for `train FILE [--entry E]`; `config_entry`: the entry of the file's own config."""
    prog = load_program(path)
    own = prog.entries()
    if entry is None:
        trainings = [a for a in own if is_training(a)]
        if trainings:
            return TrainingSource(path, None, trainings[-1].name, None)
    alg = find_entry(prog, entry or config_entry)
    if is_training(alg) or _is_loss(alg):
        return TrainingSource(path, None, entry, None)
    model_config = path.with_suffix(".toml") if path.with_suffix(".toml").is_file() else None
    wanted = [k for k in KINDS if objective in (None, k)]
    for suffix, name, number in (KINDS[k] for k in wanted):
        packaged = path.with_name(f"{path.stem}_{suffix}.alg")
        if packaged.is_file():
            return TrainingSource(packaged, None, name, model_config,
                                  f"training {alg.name} through {packaged} (the paper's {name}, Algorithm {number})")
    kind = _kind(prog, alg, objective)
    suffix, name, number = KINDS[kind]
    virtual = path.with_name(f"{path.stem}_{suffix}.alg")
    return TrainingSource(virtual, _text(path.name, alg, kind), name, model_config,
                          f"training {alg.name} through the paper's {name} (Algorithm {number}), derived from "
                          f"its kind ({'--objective ' + kind if objective else _why(prog, alg, kind)})")


def _is_loss(alg: Algorithm) -> bool:
    """A loss algorithm returns one real number per example (`loss ∈ ℝ`), a model a matrix."""
    out = alg.output_decls[0] if alg.output_decls else None
    return out is not None and out.type is not None and out.type.kind == "real" and not out.type.dims


def _sampled(prog: Program, alg: Algorithm) -> bool:
    """Whether one of the program's DInference algorithms samples from this model."""
    for module in prog.modules.values():
        for a in module.algorithms:
            if is_inference(a) and module is prog.root:
                try:
                    if plan_inference(prog, a.label or a.name).model == alg.name:
                        return True
                except CompileError:  # an inference algorithm with a mistake of its own says nothing here
                    continue
    return False


def _kind(prog: Program, alg: Algorithm, objective: str | None) -> str:
    if len(alg.data_args) == 2:
        if objective is not None:
            raise UsageError(f"{alg.name} reads two sequences ({', '.join(alg.data_args)}): it trains on pairs "
                             "(EDTraining, Algorithm 11); drop --objective")
        return "pairs"
    if objective is not None:
        if objective not in OBJECTIVES:
            raise UsageError(f"--objective {objective!r}: the objectives are {', '.join(OBJECTIVES)}")
        return objective
    if _sampled(prog, alg):
        return "next-token"
    raise UsageError(f"{alg.name} is a model, and its file says not whether it is a decoder or an encoder (a "
                     "decoder's file has a DInference, Algorithm 14, over it): add --objective next-token to train "
                     "it by next-token prediction (DTraining, Algorithm 13) or --objective masked for masked "
                     "tokens (ETraining, Algorithm 12)")


def _why(prog: Program, alg: Algorithm, kind: str) -> str:
    return "it reads two sequences" if kind == "pairs" else "the file's DInference samples from it"


def _text(model_file: str, alg: Algorithm, kind: str) -> str:
    """The paper's training algorithm over `alg`, as models/gpt2_dtraining.alg and the tests' files write it."""
    logits = not (alg.output_decls and alg.output_decls[0].type is not None
                  and alg.output_decls[0].type.kind == "prob")
    m = alg.name
    if kind == "pairs":
        call, data, sig = f"{m}(z_n, x_n | θ)", "{(z_n, x_n)}_{n=1}^{N_data}, a dataset of sequence pairs", \
            "z_{1:N_data}, x_{1:N_data}, θ"
    else:
        call, data, sig = f"{m}(x_n | θ)", "{x_n}_{n=1}^{N_data}, a dataset of sequences", "x_{1:N_data}, θ"
    p = f"softmax({call})" if logits else call
    suffix, name, number = KINDS[kind]
    head = [f'use "{model_file}"', "",
            f"Algorithm {number}: θ̂ ← {name}({sig})",
            f"  Input: {data}.",
            f"  Input: θ, initial {m} parameters.",
            "  Output: θ̂, the trained parameters."]
    if kind == "masked":
        return "\n".join(head + [
            "  Hyperparameters: N_epochs ∈ ℕ, η ∈ (0, ∞), p_mask ∈ (0, 1), mask_token ∈ V",
            "  1  for i = 1, 2, …, N_epochs do",
            "  2    for n = 1, 2, …, N_data do",
            "  3      ℓ ← length(x_n)",
            "  4      for t = 1, …, ℓ do",
            "  5        x̃_n[t] ← mask_token or x_n[t] randomly with probability p_mask or 1 − p_mask",
            "  6      end",
            "  7      T̃ ← {t ∈ [ℓ] : x̃_n[t] = mask_token}",
            f"  8      P(θ) ← {p.replace('x_n', 'x̃_n')}",
            "  9      loss(θ) = −Σ_{t ∈ T̃} log P(θ)[x_n[t], t]",
            "  10     θ ← θ − η · ∇loss(θ)",
            "  11   end",
            "  12 end",
            "  13 return θ̂ = θ", ""])
    return "\n".join(head + [
        "  Hyperparameters: N_epochs ∈ ℕ, η ∈ (0, ∞)",
        "  1 for i = 1, 2, …, N_epochs do",
        "  2   for n = 1, 2, …, N_data do",
        "  3     ℓ ← length(x_n)",
        f"  4     P(θ) ← {p}",
        "  5     loss(θ) = −Σ_{t=1}^{ℓ−1} log P(θ)[x_n[t+1], t]",
        "  6     θ ← θ − η · ∇loss(θ)",
        "  7   end",
        "  8 end",
        "  9 return θ̂ = θ", ""])
