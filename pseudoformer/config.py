"""Hyperparameter configs: a TOML file beside the model, HF config.json values, and -D overrides.

Precedence, lowest first: the `.toml` of the same name beside the `.alg` file (or --config),
then a HuggingFace checkpoint's config.json (--weights DIR), then each -D NAME=VALUE.
Names may be written as in the source (ℓ_max, ε) or in ASCII (ell_max, eps).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pseudoformer.base.errors import UsageError
from pseudoformer.base.file_access import read_text
from pseudoformer.frontend.names import parse_name


@dataclass
class Config:
    entry: str | None = None
    hyperparameters: dict[str, int | float] = field(default_factory=dict)
    # Keys that may go unused by the entry (those read from a checkpoint's config.json).
    optional: set[str] = field(default_factory=set)
    source: str | None = None


def canonical(name: str) -> str:
    return parse_name(name.strip()).ascii()


def default_config_path(alg_path: Path) -> Path | None:
    p = alg_path.with_suffix(".toml")
    return p if p.is_file() else None


def read_toml(path: Path) -> Config:
    text = read_text(path, "config file", "config")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path}: not valid TOML: {e}") from None
    except (ValueError, RecursionError) as e:  # an integer of thousands of digits, arrays nested thousands deep
        raise UsageError(f"{path}: not a config pseudoformer reads ({type(e).__name__}: {e})") from None
    unknown = set(data) - {"entry", "hyperparameters"}
    if unknown:
        raise UsageError(f"{path}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(sorted(unknown))} "
                         "(a config has `entry = \"…\"` and a [hyperparameters] table)")
    entry = data.get("entry")
    if entry is not None and not isinstance(entry, str):
        raise UsageError(f"{path}: entry must be a string")
    hyper = data.get("hyperparameters", {})
    if not isinstance(hyper, dict):
        raise UsageError(f"{path}: [hyperparameters] must be a table")
    out: dict[str, int | float] = {}
    for k, v in hyper.items():
        out[canonical(k)] = check_value(f"{path}: hyperparameter {k}", v)
    return Config(entry=entry, hyperparameters=out, source=str(path))


def parse_define(text: str) -> tuple[str, int | float]:
    if "=" not in text:
        raise UsageError(f"-D takes NAME=VALUE, got {text!r}")
    name, value = text.split("=", 1)
    if not name.strip():
        raise UsageError(f"-D {text!r}: the name is empty")
    v: int | float
    try:
        v = int(value)
    except ValueError:
        try:
            v = float(value)
        except ValueError:
            raise UsageError(f"-D {name}={value!r}: the value must be a number") from None
    return canonical(name), check_value(f"-D {name}={value!r}: the value", v)


def check_value(what: str, value: object) -> int | float:
    """The one check every hyperparameter value passes, wherever it comes from (a .toml, a checkpoint's
    config.json, -D): a finite number. Ranges (a size ≥ 1, τ > 0) are the source's, checked where the
    hyperparameter is declared, for every source alike."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and not math.isfinite(value)):
        raise UsageError(f"{what} must be a finite number, got {value!r}")
    return value


def resolve(alg_path: Path, config: str | Path | None, defines: list[str] | None,
            hf_hyper: dict[str, Any] | None = None, fallback: Path | None = None) -> Config:
    """`fallback`: the config read when there is no --config and none beside the file."""
    base = Path(config) if config is not None else default_config_path(alg_path) or fallback
    cfg = read_toml(base) if base is not None else Config()
    if config is None:
        # The model's own config serves all its entries (BERT and BERTEncoder), so unused keys are fine.
        cfg.optional |= set(cfg.hyperparameters)
    if hf_hyper:
        for k, v in hf_hyper.items():
            cfg.hyperparameters[k] = check_value(f"the checkpoint's config.json: {k}", v)
            cfg.optional.add(k)
    for d in defines or []:
        k, v = parse_define(d)
        cfg.hyperparameters[k] = v
        cfg.optional.discard(k)
    return cfg
