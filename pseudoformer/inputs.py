"""Checking a user's inputs against a model's graph: names, shapes, dtypes, lengths and token ids.

Every way of running a model (`run` on each backend, the Python API, `generate`) checks its inputs
here first, so a wrong input is one message naming it, not an error from deep inside a runtime, and
a token id out of range is refused rather than wrapped to another token as an ONNX Gather would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pseudoformer.base import limits
from pseudoformer.base.errors import UsageError
from pseudoformer.ir import DType, Graph, Node
from pseudoformer.ir.token_bounds import out_of_range, token_bounds


def check_inputs(graph: Graph, given: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Match user arrays to the graph's inputs by name, with clear errors and safe dtype conversion."""
    want = {n.attrs["name"]: n for n in graph.inputs}
    missing = [k for k in want if k not in given]
    extra = [k for k in given if k not in want]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing input{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
        if extra:
            parts.append(f"unknown input{'s' if len(extra) > 1 else ''} {', '.join(extra)}")
        raise UsageError(f"{'; '.join(parts)} (the model takes {', '.join(_spec(n) for n in graph.inputs)})")
    bounds = token_bounds(graph)
    return {name: check_input(graph, node, given[name], bounds.get(name)) for name, node in want.items()}


def check_input(graph: Graph, node: Node, value: Any, vocabulary: int | None = None) -> np.ndarray:
    """One input as the graph takes it; `vocabulary`: the size of the table its values index."""
    name = node.attrs["name"]
    try:
        a = np.asarray(value)
    except (ValueError, OverflowError) as e:
        raise UsageError(f"input {name} is not an array of numbers ({e})") from None
    t = node.type
    if a.ndim != t.rank:
        raise UsageError(f"input {name} has shape {list(a.shape)}, but the model takes {_spec(node)}")
    for d, s in zip(t.shape, a.shape, strict=True):
        if isinstance(d, int) and d != s:
            raise UsageError(f"input {name} has shape {list(a.shape)}, but the model takes {_spec(node)}")
        if isinstance(d, str):
            check_size(graph, d, s, f"input {name}")
    if t.dtype is DType.int64:
        if not np.issubdtype(a.dtype, np.integer):
            raise UsageError(f"input {name} holds {a.dtype} values; token ids must be integers")
        if vocabulary is not None:
            check_token_ids(name, a, vocabulary)
        return a.astype(np.int64)
    if t.dtype is DType.bool:
        return a.astype(bool)
    if not np.issubdtype(a.dtype, np.number) or np.issubdtype(a.dtype, np.complexfloating):
        raise UsageError(f"input {name} holds {a.dtype} values, not real numbers")
    return a.astype(np.float32)


def size_limit(graph: Graph, dim: str) -> tuple[int, str]:
    """The most a run-time size `dim` of `graph` may be, and why: the model's own limit (ℓ_max of a
    position table), else MAX_SEQ_LEN (--max-seq-len)."""
    limit = graph.meta.get("limits", {}).get(dim)
    if limit:
        return int(limit[0]), str(limit[1])
    return limits.MAX_SEQ_LEN, "the limit for a model without one of its own; --max-seq-len N raises it"


def check_size(graph: Graph, dim: str, size: int, what: str) -> None:
    """Every input-derived size is bounded before anything is allocated for it: at least 1, at most size_limit."""
    check_size_against(size, what, dim, *size_limit(graph, dim))


def check_size_against(size: int, what: str, dim: str, most: int | None = None, why: str = "") -> None:
    if most is None:
        most, why = limits.MAX_SEQ_LEN, "the limit for a model without one of its own; --max-seq-len N raises it"
    if size < 1:
        raise UsageError(f"{what} has {dim} = {size}: an empty sequence has nothing to compute on; give at least "
                         "one element")
    if size > most:
        raise UsageError(f"{what} has {dim} = {size:,}, but the model takes at most {most:,} ({why})")


def check_token_ids(name: str, ids: np.ndarray, vocabulary: int) -> None:
    """Token ids index a table of `vocabulary` rows: each must be 0 to vocabulary − 1."""
    problem = out_of_range(name, ids, vocabulary)
    if problem is not None:
        raise UsageError(problem)


def _spec(node: Any) -> str:
    return f"{node.attrs['name']}: {node.type}"
