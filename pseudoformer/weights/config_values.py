"""The values a checkpoint's config gives, typed and bounded where they enter, and named by where they came from.

config.json and a GGUF file's metadata become one config (a GGUF file's as the config.json HF would have
written, gguf_arch.py), which the family tables read. Every number and flag they read passes through here: an
integer is an integer (never a bool or a string) within what an int32 size holds, a real number is finite and
within float32's range (the model computes in float32 or narrower), a flag is true or false (the string "false"
is not false's spelling, and was read as true). A message names the file and the key the value came from: a GGUF
file's metadata key, not a config.json the user never gave.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .errors import WeightsError

# Sizes, counts and lengths: what an int32 dimension holds (onnxruntime's and the IR's sizes; a
# max_position_embeddings of 2^63 would size tables and limits past any memory).
MAX_INT = 2**31 - 1
FLOAT32_MAX = 3.4028234663852886e38


class SourcedConfig(dict[str, Any]):
    """A config with the file it came from and, for a GGUF file, the metadata key behind each field."""

    def __init__(self, fields: Mapping[str, Any], origin: str, keys: Mapping[str, str] | None = None) -> None:
        super().__init__(fields)
        self.origin = origin
        self.keys = dict(keys or {})


def where(config: Mapping[str, Any], key: str | None = None) -> str:
    """How a message names `key` of `config`: "config.json: rope_theta", "model.gguf: metadata llama.rope.freq_base"."""
    if isinstance(config, SourcedConfig):
        if key is None:
            return config.origin
        return f"{config.origin}: metadata {config.keys[key]}" if key in config.keys else f"{config.origin}: {key}"
    return "config.json" if key is None else f"config.json: {key}"


def int_problem(value: object) -> str | None:
    """Why `value` is no size or count (None: it is one)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return "is not an integer"
    if value <= 0:
        return "is not positive"
    if value > MAX_INT:
        return f"is past {MAX_INT:,}, the largest size a model here takes"
    return None


def float_problem(value: object, *, positive: bool = True) -> str | None:
    """Why `value` is no finite float32 number (positive, unless told otherwise) (None: it is one)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "is not a number"
    if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
        return "is not a finite float32 number"
    if positive and not value > 0:
        return "is not positive"
    return None


def config_int(config: Mapping[str, Any], key: str, default: int) -> int:
    value = config.get(key, default)
    if value is None:
        value = default
    if (why := int_problem(value)) is not None:
        raise WeightsError(f"{where(config, key)} = {value!r} {why}")
    return value


def config_float(config: Mapping[str, Any], key: str, default: float) -> float:
    value = config.get(key, default)
    if value is None:
        value = default
    if (why := float_problem(value)) is not None:
        raise WeightsError(f"{where(config, key)} = {value!r} {why}")
    return float(value)


def config_bool(config: Mapping[str, Any], key: str, default: bool) -> bool:
    value = config.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise WeightsError(f"{where(config, key)} = {value!r} is not true or false")
    return value
