"""Machinery shared by the HF -> our-name mappings: prefix stripping and rule dispatch.

A mapping is a list of rules (regex over the HF name with its model prefix removed -> handler).
Handlers emit our-named tensors through a ``Collector``, which remembers which HF tensor each came
from so that a later shape complaint can name the file's tensor, not only ours.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

import numpy as np

from .errors import Problem, WeightsError, fmt_shape

Handler = Callable[[re.Match[str], np.ndarray, "Collector"], None]


@dataclass
class Collector:
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    hf_name: str = ""  # the HF tensor being handled, set by apply_rules

    def put(self, ours: str, array: np.ndarray) -> None:
        if ours in self.tensors:
            self.problem(self.hf_name, "invalid", f"maps to {ours}, which {self.origin[ours]} already gave")
            return
        self.tensors[ours] = array
        self.origin[ours] = self.hf_name

    def problem(self, name: str, kind: str, detail: str) -> None:
        self.problems.append(Problem(name, kind, detail))


def strip_prefix(tensors: Mapping[str, np.ndarray], prefix: str) -> dict[str, tuple[str, np.ndarray]]:
    """Names without the task-model prefix (``transformer.``, ``bert.``) -> (stored name, tensor).

    Base-model saves have no prefix and task-model saves do; both are accepted. A file holding a
    tensor under both spellings is ambiguous and refused rather than silently picking one.
    """
    out: dict[str, tuple[str, np.ndarray]] = {}
    clashes: list[str] = []
    for stored, array in tensors.items():
        short = stored.removeprefix(prefix)
        if short in out:
            clashes.append(f"{short}: stored both as {out[short][0]!r} and {stored!r}")
            continue
        out[short] = (stored, array)
    if clashes:
        raise WeightsError("checkpoint holds the same tensor under two names", sorted(clashes))
    return out


def apply_rules(
    tensors: Mapping[str, tuple[str, np.ndarray]],
    rules: list[tuple[re.Pattern[str], Handler]],
    ignored: Collection[re.Pattern[str]],
    model_type: str,
    col: Collector,
) -> None:
    """Run each tensor through the first rule whose pattern matches its whole (short) name."""
    for short, (stored, array) in tensors.items():
        col.hf_name = stored
        for pattern, handler in rules:
            m = pattern.fullmatch(short)
            if m:
                handler(m, array, col)
                break
        else:
            if not any(p.fullmatch(short) for p in ignored):
                col.problem(
                    stored,
                    "unknown",
                    f"HF tensor of shape {fmt_shape(array.shape)} that no {model_type} model here uses",
                )
    col.hf_name = ""


def check_ndim(array: np.ndarray, ndim: int, col: Collector) -> bool:
    if array.ndim == ndim:
        return True
    col.problem(col.hf_name, "invalid", f"expected a {ndim}-d tensor, got shape {fmt_shape(array.shape)}")
    return False


def split_heads(
    array: np.ndarray, axis: int, parts: int, heads: int, col: Collector
) -> list[list[np.ndarray]]:
    """Cut ``axis`` into ``parts`` equal blocks, each into ``heads`` equal slices: [part][head].

    Returns [] (after recording a problem) when the axis does not divide, since a guess at the
    split would silently scramble the heads.
    """
    size = array.shape[axis]
    if size % (parts * heads):
        col.problem(
            col.hf_name,
            "invalid",
            f"axis {axis} of shape {fmt_shape(array.shape)} does not split into {parts} x {heads} heads",
        )
        return []
    block = size // parts
    dh = block // heads
    idx = [slice(None)] * array.ndim
    out: list[list[np.ndarray]] = []
    for p in range(parts):
        row = []
        for h in range(heads):
            idx[axis] = slice(p * block + h * dh, p * block + (h + 1) * dh)
            row.append(array[tuple(idx)])
        out.append(row)
    return out


def config_int(config: Mapping[str, object], key: str, default: int) -> int:
    value = config.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise WeightsError(f"config.json: {key} = {value!r} is not a positive integer")
    return value


def config_float(config: Mapping[str, object], key: str, default: float) -> float:
    value = config.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise WeightsError(f"config.json: {key} = {value!r} is not a positive number")
    return float(value)
