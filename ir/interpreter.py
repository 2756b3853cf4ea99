"""The numpy reference interpreter: the semantic oracle every backend is tested against.

It evaluates `Graph.nodes()` in order, in the graph's own dtypes, and checks each result against
its node's type (dtype, rank, concrete dims, and one size per symbolic dim across the whole run),
so a disagreement between typing rules and run-time semantics shows up here first, at the node
that caused it, rather than as a numeric mismatch in some backend far downstream.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from pseudoformer.ir.graph import Graph
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op
from pseudoformer.ir.printer import location, value_numbers
from pseudoformer.ir.types import TensorType


class InterpreterError(Exception):
    """Bad inputs or params, or a node whose result contradicts its type."""


# --- erf -------------------------------------------------------------------------------------
# numpy has no erf and scipy is not a dependency. These are W. J. Cody's rational Chebyshev
# approximations ("Rational Chebyshev approximations for the error function", Math. Comp. 1969),
# good to ~1e-16 relative in float64, evaluated per interval on just the elements that fall in it.
_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
      3.20937758913846947e03, 1.85777706184603153e-1)
_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
      2.84423683343917062e03)
_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
      2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
      2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)
_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
      1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
      3.43936767414372164e03, 1.23033935480374942e03)
_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
      1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)
_Q = (2.56852019228982242e00, 1.87295284992346047e00, 5.27905102951428412e-1,
      6.05183413124413191e-2, 2.33520497626869185e-3)
_SQRT_1_PI = 5.6418958354775628695e-1


def _ratio(num: tuple[float, ...], den: tuple[float, ...], t: np.ndarray) -> np.ndarray:
    """Cody's nested form: leading coefficient last in `num`, monic denominator. In place, because
    temporaries, not arithmetic, dominate the cost on large arrays."""
    k = len(den)
    xnum = num[-1] * t
    xden = t.copy()
    for i in range(k - 1):
        xnum += num[i]
        xnum *= t
        xden += den[i]
        xden *= t
    xnum += num[k - 1]
    xden += den[k - 1]
    xnum /= xden
    return xnum


def _exp_neg_sq(y: np.ndarray) -> np.ndarray:
    # exp(-y*y) with y*y split so that rounding y*y does not cost relative accuracy in the tail.
    ysq = np.trunc(y * 16.0)
    ysq /= 16.0
    out = np.exp(-ysq * ysq)
    out *= np.exp(-(y - ysq) * (y + ysq))
    return out


def _erf_parts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(small, erf on small, erfc(|x|) on the rest); NaN stays NaN."""
    y = np.abs(x)
    small = y <= 0.46875
    tail = np.full(x.shape, np.nan)
    mid = (y > 0.46875) & (y <= 4.0)
    ym = y[mid]
    tail[mid] = _exp_neg_sq(ym) * _ratio(_C, _D, ym)
    big = y > 4.0
    yb = np.minimum(y[big], 40.0)  # erfc is 0 in float64 long before 40; inf would give inf-inf
    inv = 1.0 / (yb * yb)
    r = (_SQRT_1_PI - inv * _ratio(_P, _Q, inv)) / yb
    tail[big] = _exp_neg_sq(yb) * r  # underflows to 0 by itself beyond x = 27.3
    xs = x[small]
    return small, xs * _ratio(_A, _B, xs * xs), tail


def erf(x: Any) -> np.ndarray:
    """The error function in float64, to ~1e-16 relative."""
    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(-1)  # 1-d so that masked assignment also works for 0-d arguments
    small, head, tail = _erf_parts(flat)
    out = np.copysign(1.0 - tail, flat)  # 1 - erfc(|x|) is accurate where |x| > 0.46875
    out[small] = head
    return out.reshape(x.shape)


def erfc(x: Any) -> np.ndarray:
    """The complementary error function in float64, accurate in relative terms far into the tail."""
    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(-1)
    small, head, tail = _erf_parts(flat)
    out = np.where(flat < 0, 2.0 - tail, tail)
    out[small] = 1.0 - head
    return out.reshape(x.shape)


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    """GELU in float64, rounded once to x's dtype, so the oracle is as exact as its dtype allows."""
    x64 = x.astype(np.float64)
    if approximate == "none":
        # 0.5x(1 + erf(x/sqrt2)) written with erfc, which keeps its relative accuracy for x << 0.
        y = 0.5 * x64 * erfc(-x64 / math.sqrt(2.0))
    elif approximate == "tanh":
        y = 0.5 * x64 * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x64 + 0.044715 * x64**3)))
    else:
        raise InterpreterError(f"unknown gelu approximation {approximate!r}")
    return y.astype(x.dtype)


# --- ops -------------------------------------------------------------------------------------


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        # Integer division truncates toward zero, as in ONNX Div and C; numpy's // floors.
        q = np.abs(a) // np.abs(b)
        return np.where((a < 0) != (b < 0), -q, q)
    return np.divide(a, b)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.zeros((), x.dtype))


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    # Subtracting the max keeps exp in range; an all -inf row gives NaN, as it does in numpy and
    # torch, and is left visible on purpose.
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _slice(x: np.ndarray, start: np.ndarray, stop: np.ndarray, axis: int) -> np.ndarray:
    index: list[slice] = [slice(None)] * x.ndim
    index[axis] = slice(int(start), int(stop))
    return x[tuple(index)]


_RELS: dict[str, Callable[[Any, Any], np.ndarray]] = {
    "<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
    "==": np.equal, "!=": np.not_equal,
}


def _index_mask(rows: np.ndarray, cols: np.ndarray, rel: str) -> np.ndarray:
    i = np.arange(int(rows), dtype=np.int64)[:, None]
    j = np.arange(int(cols), dtype=np.int64)[None, :]
    return _RELS[rel](i, j)


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, axis: int, eps: float) -> np.ndarray:
    axis %= x.ndim
    shape = [1] * x.ndim
    shape[axis] = -1
    m = x.mean(axis=axis, keepdims=True)
    v = ((x - m) ** 2).mean(axis=axis, keepdims=True)
    return ((x - m) / np.sqrt(v + np.asarray(eps, x.dtype)) * g.reshape(shape) + b.reshape(shape)).astype(x.dtype)


def _rms_norm(x: np.ndarray, g: np.ndarray, axis: int, eps: float) -> np.ndarray:
    shape = [1] * x.ndim
    shape[axis] = -1
    r = (x * x).mean(axis=axis, keepdims=True)
    return (x / np.sqrt(r + np.asarray(eps, x.dtype)) * g.reshape(shape)).astype(x.dtype)


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, scale: float,
               causal: bool) -> np.ndarray:
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * np.asarray(scale, q.dtype)
    keep = np.ones(s.shape[-2:], dtype=bool)
    if mask is not None:
        keep = keep & mask  # a per-example mask broadcasts keep to the scores' shape
    if causal:  # bottom-right aligned: the queries are the last s_q of the s_k positions
        sq, sk = s.shape[-2:]
        keep &= np.tril(np.ones((sq, sk), dtype=bool), k=sk - sq)
    s = np.where(keep, s, np.asarray(-np.inf, q.dtype))
    return np.matmul(_softmax(s, -1), v).astype(q.dtype)


def _reshape(n: Node, x: np.ndarray) -> np.ndarray:
    src = n.src[0].type.shape
    dims: list[int] = []
    for d in n.attrs["shape"]:
        if isinstance(d, str):
            if d not in src:
                raise InterpreterError(f"reshape dim {d!r} is not a dim of the operand type {n.src[0].type}")
            dims.append(x.shape[src.index(d)])
        else:
            dims.append(int(d))
    return np.reshape(x, dims)


def _reduce(fn: Callable[..., Any], n: Node, x: np.ndarray) -> np.ndarray:
    return fn(x, axis=tuple(n.attrs["axes"]), keepdims=bool(n.attrs.get("keepdims", False)))


_UNARY: dict[Op, Callable[[np.ndarray], np.ndarray]] = {
    Op.NEG: np.negative, Op.EXP: np.exp, Op.LOG: np.log, Op.SQRT: np.sqrt, Op.TANH: np.tanh,
    Op.SIN: np.sin, Op.COS: np.cos, Op.ABS: np.abs, Op.RELU: _relu, Op.NOT: np.logical_not,
    Op.ERF: lambda x: erf(x).astype(x.dtype),
}
_BINARY: dict[Op, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.DIV: _div, Op.POW: np.power,
    Op.MAX: np.maximum, Op.MIN: np.minimum, Op.LT: np.less, Op.LE: np.less_equal,
    Op.GT: np.greater, Op.GE: np.greater_equal, Op.EQ: np.equal, Op.NE: np.not_equal,
    Op.AND: np.logical_and, Op.OR: np.logical_or, Op.MATMUL: np.matmul,
}


def _eval(n: Node, a: list[np.ndarray]) -> Any:
    op, at = n.op, n.attrs
    if op in _UNARY:
        return _UNARY[op](a[0])
    if op in _BINARY:
        return _BINARY[op](a[0], a[1])
    if op is Op.CONST:
        return np.array(at["value"], dtype=np.dtype(at["dtype"].value))
    if op is Op.GELU:
        return gelu(a[0], at.get("approximate", "none"))
    if op is Op.CAST:
        return a[0].astype(np.dtype(at["dtype"].value))
    if op is Op.WHERE:
        return np.where(a[0], a[1], a[2])
    if op is Op.TRANSPOSE:
        return np.transpose(a[0], tuple(at["perm"]))
    if op is Op.UNSQUEEZE:
        return np.expand_dims(a[0], tuple(at["axes"]))
    if op is Op.SQUEEZE:
        return np.squeeze(a[0], axis=tuple(at["axes"]))
    if op is Op.RESHAPE:
        return _reshape(n, a[0])
    if op is Op.CONCAT:
        return np.concatenate(a, axis=at["axis"])
    if op is Op.REDUCE_SUM:
        return _reduce(np.sum, n, a[0])
    if op is Op.REDUCE_MAX:
        return _reduce(np.max, n, a[0])
    if op is Op.REDUCE_MEAN:
        # numpy's mean of ints is float64; the IR keeps the operand's dtype.
        return _reduce(np.mean, n, a[0]).astype(a[0].dtype)
    if op is Op.SOFTMAX:
        return _softmax(a[0], at["axis"])
    if op is Op.GATHER:
        return np.take(a[0], a[1], axis=at["axis"])
    if op is Op.DIM:
        return np.array(a[0].shape[at["axis"]], dtype=np.int64)
    if op is Op.ARANGE:
        return np.arange(int(a[0]), dtype=np.int64)
    if op is Op.SLICE:
        return _slice(a[0], a[1], a[2], at["axis"])
    if op is Op.INDEX_MASK:
        return _index_mask(a[0], a[1], at["rel"])
    if op is Op.LAYER_NORM:
        return _layer_norm(a[0], a[1], a[2], at["axis"], at["eps"])
    if op is Op.RMS_NORM:
        return _rms_norm(a[0], a[1], at["axis"], at["eps"])
    if op is Op.ATTENTION:
        return _attention(a[0], a[1], a[2], a[3] if len(a) > 3 else None, at["scale"], at["causal"])
    raise InterpreterError(f"no semantics for op {op.value}")


# --- checking values against types -------------------------------------------------------------


def _mismatch(value: np.ndarray, t: TensorType, sizes: dict[str, int]) -> str | None:
    """Why `value` is not of type `t`, binding unbound symbolic dims in `sizes`; None if it is."""
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
        why = _mismatch(np.asarray(params[name]), n.type, sizes)
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
                out = np.asarray(params[n.attrs["name"]]) if n.op is Op.PARAM else None
                try:
                    if out is None:
                        out = np.asarray(_eval(n, [values[id(s)] for s in n.src]))
                except InterpreterError as e:
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
