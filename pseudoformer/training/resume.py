"""`train --resume DIR`: a run's -o folder read back (training.json, model.safetensors, optimizer.safetensors,
loss.csv; run_folder.current picks one generation of them), the optimizer state put in place of a new step's, and
the one message for a folder whose training.json does not record the model's hyperparameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pseudoformer.base.errors import UsageError
from pseudoformer.base.file_access import loads_json, read_text
from pseudoformer.config import check_value
from pseudoformer.passes.training_step import STEP
from pseudoformer.training import run_folder
from pseudoformer.training.outputs import read_loss_curve
from pseudoformer.training.precision import STATE_PREFIX
from pseudoformer.training.steps import Row

if TYPE_CHECKING:
    from pseudoformer.training.compile import CompiledStep
    from pseudoformer.training.torch_loop import TorchStep


@dataclass(frozen=True)
class Resumed:
    """A run's directory read back for --resume: the weights file, the optimizer state, the steps done."""

    weights: Path
    state: dict[str, np.ndarray]
    steps: int
    hf_source: Path | None  # the HF checkpoint the run started from, which its hf/ export follows
    group: str | None  # the parameter group that checkpoint filled
    history: list[Row]  # its loss.csv
    skipped: list[int]  # its steps whose update was skipped (fp16 overflow)
    step_rows: int | None  # the examples a step took (--batch-size × --grad-accum), where training.json says
    # the model's hyperparameters as the run resolved them (its config, its checkpoint's config.json, -D), which
    # model.safetensors does not say; None in a training.json written before they were recorded
    hyperparameters: dict[str, int | float] | None
    tied: bool | None  # whether the run read W_u as W_eᵀ (training.json's ties), where it says


def read_resume(directory: str | Path) -> Resumed:
    from pseudoformer.weights.safetensors_io import read_safetensors

    shown = Path(directory)
    d = run_folder.current(shown)  # every file from one generation, even while another run saves there
    meta_path, weights = d / "training.json", d / "model.safetensors"
    if not meta_path.is_file() or not weights.is_file():
        raise UsageError(f"--resume {shown}: no training.json and model.safetensors there (the -o DIR of a run, "
                         "written at --save-every or at its end)")
    try:
        meta = loads_json(read_text(meta_path, "training.json", "config"))
        steps = meta["steps"]
    except (ValueError, KeyError, TypeError) as e:
        raise UsageError(f"--resume {shown}: cannot read training.json ({e})") from None
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise UsageError(f"--resume {shown}: training.json's steps is {steps!r}, not a count of steps")
    state = read_safetensors(d / "optimizer.safetensors") if (d / "optimizer.safetensors").is_file() else {}
    hf, group, skipped = meta.get("hf_source"), meta.get("weights_group"), meta.get("skipped_steps")
    skipped = [k for k in skipped if isinstance(k, int) and 0 < k <= steps] if isinstance(skipped, list) else []
    options = meta.get("options") if isinstance(meta.get("options"), dict) else {}
    size, accum = options.get("batch_size"), options.get("grad_accum", 1)
    step_rows = size * accum if all(isinstance(v, int) and not isinstance(v, bool) for v in (size, accum)) else None
    hyper = meta.get("hyperparameters")
    if hyper is not None:
        if not isinstance(hyper, dict):
            raise UsageError(f"--resume {shown}: training.json's hyperparameters are not a table of names and values")
        hyper = {str(k): check_value(f"--resume {shown}: training.json's hyperparameter {k}", v)
                 for k, v in hyper.items()}
    ties = meta.get("ties")
    source = Path(hf) if isinstance(hf, str) and Path(hf).is_dir() else None
    if source is None and isinstance(hf, str) and (d / "hf" / "config.json").is_file():
        # the checkpoint the run started from is gone: its own hf/ export, a whole HF checkpoint of the same
        # config and tokenizer, is the source the next export follows (read through the folder's link, which a
        # save re-points only after it has written the new one)
        source = shown.absolute() / "hf"
    return Resumed(weights, state, steps, source,
                   group if isinstance(group, str) else None, read_loss_curve(d)[:steps], skipped, step_rows,
                   hyper, bool(ties) if isinstance(ties, dict) else None)


def unrecorded(resumed: Resumed, where: Any, error: Exception) -> UsageError:
    """The message for a run whose model did not load from its model.safetensors where training.json records no
    hyperparameters (a run saved before they were recorded): the first line of what went wrong, its weights named
    as the user knows them (not by the generation's path), and what to give."""
    first = (str(error).strip().splitlines() or [type(error).__name__])[0].removeprefix("error: ")
    first = first.replace(str(resumed.weights), str(Path(where) / "model.safetensors"))
    return UsageError(f"--resume {where}: its training.json does not record the model's hyperparameters (a run saved "
                      f"by an older pseudoformer), and without them the model does not load ({first}): give the "
                      "run's own --config or -D sizes")


def restore_state(step: CompiledStep | TorchStep, resumed: Resumed, where: Any) -> None:
    """The optimizer state of the resumed run in place of the step's initial one, each tensor checked."""
    wanted = {k for k in step.state if k.startswith(("m.", "v.", STATE_PREFIX)) or k == STEP}
    got = set(resumed.state)
    if wanted != got:
        missing, extra = sorted(wanted - got), sorted(got - wanted)
        raise UsageError(f"--resume {where}: optimizer.safetensors does not fit this step (missing "
                         f"{', '.join(missing[:4]) or 'none'}; not of it {', '.join(extra[:4]) or 'none'}): resume "
                         "with the run's own --optimizer, --train and --precision")
    for k in wanted:
        v = np.asarray(resumed.state[k], np.float32)
        if v.size == 1 and np.ndim(step.state[k]) == 0:  # the step count t, saved as one element
            v = v.reshape(())
        if v.shape != np.shape(step.state[k]) or not np.isfinite(v).all():
            raise UsageError(f"--resume {where}: optimizer state {k} is {list(v.shape)} or not finite; the step's "
                             f"is {list(np.shape(step.state[k]))}")
        step.state[k] = v
