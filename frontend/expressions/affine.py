"""Indices that are affine in one map variable: `X[i + d/2, t]`, `W_p[2i − 1, t]`, `x[t + 1]`.

Such an index is `a·i + b` with a whole number a and a size b, known when the graph is built. It
reads (or, as a target, writes) the positions b + a, b + 2a, …, b + a·n of its axis for i ∈ [n]:
with a = 1 that is a slice, with a > 1 a strided run. Since every position is known as a size
polynomial, the compiler proves the run in range, or out of range (a diagnostic at the index),
or neither (sizes only known at run time), where the general gather and its run-time check apply.
"""

from __future__ import annotations

from dataclasses import dataclass

from pseudoformer.frontend.ast import Expr
from pseudoformer.frontend.expressions.core import size_node
from pseudoformer.frontend.frame import Frame
from pseudoformer.frontend.names import parse_name
from pseudoformer.frontend.sizes import Size, quotient, simplify
from pseudoformer.ir import DType, Node, Op


@dataclass(frozen=True)
class Linear:
    """Σ coef[v]·v + offset over map variables v (by source name); the paper's 1-based values."""

    coef: tuple[tuple[str, int], ...]
    offset: Size

    def __add__(self, o: Linear) -> Linear:
        c = dict(self.coef)
        for v, k in o.coef:
            c[v] = c.get(v, 0) + k
        return Linear(tuple((v, k) for v, k in c.items() if k), simplify(self.offset + o.offset))

    def scale(self, k: int) -> Linear:
        return Linear(tuple((v, c * k) for v, c in self.coef if c * k), simplify(self.offset * k))


@dataclass(frozen=True)
class Run:
    """The 0-based positions start, start + stride, …, start + stride·(count − 1) of an axis."""

    var: str
    start: Size
    stride: int
    count: Size


def linear(f: Frame, e: Expr) -> Linear | None:
    """e as a linear form over map variables with whole coefficients and a size offset; None if it is not one."""
    op = e.op
    if op == "number":
        v = e.args[0]
        return Linear((), Size.of(v)) if isinstance(v, int) else None
    if op == "name":
        if e.text in f.maps:
            return Linear(((e.text, 1),), Size.of(0))
        if e.text in f.loops:
            return Linear((), Size.of(f.loops[e.text]))
        if _shadowed(f, e.text):
            return None
        s = f.size_of_name(e.text, e.pos, create=False)
        return Linear((), f.b.resolve(s)) if s is not None else None
    if op in ("add", "sub"):
        x, y = linear(f, e.args[0]), linear(f, e.args[1])
        if x is None or y is None:
            return None
        return x + (y if op == "add" else y.scale(-1))
    if op == "neg":
        x = linear(f, e.args[0])
        return x.scale(-1) if x is not None else None
    if op in ("juxt", "matmul"):
        x, y = linear(f, e.args[0]), linear(f, e.args[1])
        if x is None or y is None:
            return None
        for a, b in ((x, y), (y, x)):
            if not a.coef and a.offset.is_int:
                return b.scale(a.offset.value)
        if not x.coef and not y.coef:
            return Linear((), x.offset * y.offset)
        return None
    if op == "div":
        x, y = linear(f, e.args[0]), linear(f, e.args[1])
        if x is None or y is None or x.coef or y.coef:
            return None
        q = _size_div(f, x.offset, y.offset)
        return Linear((), q) if q is not None else None
    return None


def _shadowed(f: Frame, text: str) -> bool:
    """A name that is a value (assigned, a hyperparameter or a real) is not a size here."""
    key = parse_name(text).key(f.active())
    return key in f.vars or key in f.hyper_keys()


def _size_div(f: Frame, x: Size, y: Size) -> Size | None:
    q = f.b.resolve(x).div(f.b.resolve(y))
    if q is not None:
        return q
    if f.root().symbolic and y.is_int and y.value > 0 and not x.is_int:
        return quotient(f.b.resolve(x), y.value)
    return None


def size_expr(f: Frame, e: Expr) -> Size | None:
    """A map's bound or an index that is a size expression (`d/2`, `ℓ − 1`); None if e is not one."""
    lin = linear(f, e)
    return lin.offset if lin is not None and not lin.coef else None


def run_of(f: Frame, e: Expr) -> Run | None:
    """An index `a·i + b` over one map variable i with a ≥ 1, as the 0-based run it covers."""
    lin = linear(f, e)
    if lin is None or len(lin.coef) != 1:
        return None
    (var, a), = lin.coef
    mv = f.maps.get(var)
    if a < 1 or mv is None or mv.size is None:
        return None
    return Run(var, f.b.resolve(lin.offset + a - 1), a, f.b.resolve(mv.size))


def last(run: Run) -> Size:
    """The run's last 0-based position."""
    return simplify(run.start + run.count * run.stride - run.stride)


def proven(s: Size) -> bool | None:
    """Whether s ≥ 0 for every value of its names (all sizes ≥ 1): True, False, or None (unknown)."""
    if s.is_int:
        return s.value >= 0
    if any(n.startswith("?") for n in s.names()):
        return None
    # Every size is at least 1: with coefficients of one sign the extreme is at all sizes 1.
    at_ones = sum(c for _, c in s.terms)
    if all(c >= 0 for m, c in s.terms if m) and at_ones >= 0:
        return True
    if all(c <= 0 for m, c in s.terms if m) and at_ones < 0:
        return False
    return None


def in_range(run: Run, extent: Size) -> bool | None:
    """Whether the run lies in [0, extent): True, False, or None when only run time can tell."""
    lo, hi = proven(run.start), proven(extent - last(run) - 1)
    if lo is False or hi is False:
        return False
    if lo and hi:
        return True
    return None


def poly_node(f: Frame, s: Size, pos: object) -> Node:
    """An int64 scalar computing the size polynomial s at run time (ℓ + 1 from ℓ's run-time dim)."""
    s = f.b.resolve(s)
    if s.is_int or len(s.terms) == 1 and s.terms[0][1] == 1:
        return size_node(f, s, pos)
    total: Node | None = None
    for mono, c in s.terms:
        term = f.b.const(c, DType.int64)
        for name in mono:
            term = f.b.node(Op.MUL, term, size_node(f, Size.of(name), pos))
        total = term if total is None else f.b.node(Op.ADD, total, term)
    assert total is not None
    return total


def run_positions(f: Frame, run: Run, pos: object) -> Node:
    """The run's positions as an int64 vector: arange(count)·stride + start."""
    idx = f.b.node(Op.ARANGE, poly_node(f, run.count, pos), dim=run.count.dim())
    if run.stride != 1:
        idx = f.b.node(Op.MUL, idx, f.b.const(run.stride, DType.int64))
    if run.start != Size.of(0):
        idx = f.b.node(Op.ADD, idx, poly_node(f, run.start, pos))
    return idx
