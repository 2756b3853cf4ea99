"""The numpy reference interpreter: the semantic oracle every backend is tested against.

It evaluates `Graph.nodes()` in order, in the graph's own dtypes, each node by its op's reference
implementation (the `impl` of its OpDef in ir/ops/), and checks each result against
its node's type (dtype, rank, concrete dims, and one size per symbolic dim across the whole run),
so a disagreement between typing rules and run-time semantics shows up here first, at the node
that caused it, rather than as a numeric mismatch in some backend far downstream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pseudoformer.ir.graph import Graph
from pseudoformer.ir.lazy_tensor import LazyTensor, materialize
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import EvalError, Op, op_def
from pseudoformer.ir.ops.gelu import erf, erfc, gelu
from pseudoformer.ir.printer import location, value_numbers
from pseudoformer.ir.types import TensorType, TupleType

__all__ = ["InterpreterError", "erf", "erfc", "gelu", "run"]


class InterpreterError(Exception):
    """Bad inputs or params, or a node whose result contradicts its type."""


# --- checking values against types -------------------------------------------------------------


def _mismatch(value: Any, t: TensorType | TupleType, sizes: dict[str, int]) -> str | None:
    """Why `value` is not of type `t`, binding unbound symbolic dims in `sizes`; None if it is."""
    if isinstance(t, TupleType):
        if not isinstance(value, tuple) or len(value) != len(t.types):
            return f"{type(value).__name__}, expected {t}"
        for i, (v, e) in enumerate(zip(value, t.types, strict=True)):
            why = _mismatch(np.asarray(v), e, sizes)
            if why:
                return f"element {i}: {why}"
        return None
    if value.dtype != np.dtype(t.dtype.value):
        return f"dtype {value.dtype}, expected {t}"
    if value.ndim != t.rank:
        return f"shape {value.shape} has rank {value.ndim}, expected {t}"
    for axis, (got, want) in enumerate(zip(value.shape, t.shape, strict=True)):
        if isinstance(want, str):
            bound = sizes.setdefault(want, got)
            if bound != got:
                return f"axis {axis} ({want!r}) has size {got}, but {want!r} is already {bound}"
        elif got != want:
            return f"shape {value.shape}, expected {t}"
    return None


def _bind_arguments(graph: Graph, inputs: Mapping[str, Any], params: Mapping[str, Any],
                    sizes: dict[str, int]) -> dict[int, np.ndarray]:
    problems: list[str] = []
    values: dict[int, np.ndarray] = {}
    names = [n.attrs["name"] for n in graph.inputs]
    problems += [f"unknown input {k!r} (the graph takes {names})" for k in inputs if k not in names]
    for n in graph.inputs:
        name = n.attrs["name"]
        if name not in inputs:
            problems.append(f"missing input {name!r}: {n.type}")
            continue
        values[id(n)] = np.asarray(inputs[name])
        why = _mismatch(values[id(n)], n.type, sizes)
        if why:
            problems.append(f"input {name!r}: {why}")
    seen: set[str] = set()
    for n in graph.params():
        name = n.attrs["name"]
        seen.add(name)
        if name not in params:
            problems.append(f"missing param {name!r}: {n.type}")
            continue
        value = params[name]  # a LazyTensor has the shape and dtype to check, and loads when read
        why = _mismatch(value if isinstance(value, LazyTensor) else np.asarray(value), n.type, sizes)
        if why:
            problems.append(f"param {name!r}: {why}")
    if problems:
        raise InterpreterError("cannot run the graph:\n" + "\n".join(f"  - {p}" for p in problems))
    return values


def _last_uses(nodes: list[Node]) -> dict[int, int]:
    last: dict[int, int] = {}
    for i, n in enumerate(nodes):
        for s in n.src:
            last[id(s)] = i
    return last


def run(graph: Graph, inputs: Mapping[str, np.ndarray], params: Mapping[str, np.ndarray],
        ) -> dict[str, np.ndarray]:
    """Evaluate `graph`; returns {output name: array} in the graph's output order.

    Raises InterpreterError listing every missing, unknown or mis-typed input and param, or naming
    the node whose result contradicts its type.
    """
    nodes = graph.nodes()
    numbers = value_numbers(nodes)
    sizes: dict[str, int] = {}  # symbolic dim -> its size in this run
    values = _bind_arguments(graph, inputs, params, sizes)
    keep = {id(n) for _, n in graph.outputs}
    last = _last_uses(nodes)
    with np.errstate(all="ignore"):  # NaN and inf are results to compare, not reasons to warn
        for i, n in enumerate(nodes):
            if id(n) not in values:
                if n.op is Op.INPUT:
                    raise InterpreterError(f"%{i} is an input node that is not among the graph's inputs")
                out = materialize(params[n.attrs["name"]]) if n.op is Op.PARAM else None
                try:
                    if out is None:
                        out = op_def(n.op).impl(n, [values[id(s)] for s in n.src])
                        out = out if isinstance(out, tuple) else np.asarray(out)
                except (InterpreterError, EvalError) as e:
                    raise InterpreterError(f"{_where(n, numbers)}: {e}") from e
                except Exception as e:  # numpy's own errors, e.g. a gather index out of range
                    raise InterpreterError(f"{_where(n, numbers)}: {type(e).__name__}: {e}") from e
                why = _mismatch(out, n.type, sizes)
                if why:
                    raise InterpreterError(f"{_where(n, numbers)} produced {why}")
                values[id(n)] = out
            # Free operands nobody needs any more; a full model's activations add up.
            for s in n.src:
                if last.get(id(s)) == i and id(s) not in keep:
                    values.pop(id(s), None)
    return {name: values[id(n)] for name, n in graph.outputs}


def _where(n: Node, numbers: dict[int, int]) -> str:
    loc = location(n.span, n.scope)
    return f"%{numbers[id(n)]} ({n.op.value}{', ' + loc if loc else ''})"
