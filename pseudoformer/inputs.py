"""Checking a user's inputs against a model's graph: names, shapes, dtypes, lengths and token ids.

Every way of running a model (`run` on each backend, the Python API, `generate`) checks its inputs
here first, so a wrong input is one message naming it, not an error from deep inside a runtime, and
a token id out of range is refused rather than wrapped to another token as an ONNX Gather would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pseudoformer.errors import UsageError
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
    limits = graph.meta.get("limits", {})
    for d, s in zip(t.shape, a.shape, strict=True):
        if isinstance(d, int) and d != s:
            raise UsageError(f"input {name} has shape {list(a.shape)}, but the model takes {_spec(node)}")
        if isinstance(d, str) and d in limits and s > limits[d][0]:
            raise UsageError(f"input {name} has {d} = {s}, but the model takes at most {limits[d][0]} "
                             f"({limits[d][1]})")
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


def check_token_ids(name: str, ids: np.ndarray, vocabulary: int) -> None:
    """Token ids index a table of `vocabulary` rows: each must be 0 to vocabulary − 1."""
    problem = out_of_range(name, ids, vocabulary)
    if problem is not None:
        raise UsageError(problem)


def _spec(node: Any) -> str:
    return f"{node.attrs['name']}: {node.type}"
