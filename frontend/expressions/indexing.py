"""Indexing: X[:, t] over a map variable, a prefix of positions, and gathers at computed positions or token ids."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from pseudoformer.frontend.ast import Expr
from pseudoformer.frontend.errors import BadTypeError, ShapeError
from pseudoformer.frontend.expressions.affine import (
    Run,
    in_range,
    last,
    poly_node,
    proven,
    run_of,
    run_positions,
)
from pseudoformer.frontend.expressions.computed_index import linear_index, pick, real_index
from pseudoformer.frontend.expressions.core import const, describe, ev, handles, shown, size_node
from pseudoformer.frontend.expressions.gather_along import gather_along
from pseudoformer.frontend.expressions.integers import static_int
from pseudoformer.frontend.frame import Frame
from pseudoformer.frontend.sizes import BROADCAST, Size
from pseudoformer.frontend.tensor_ops import dim_to_free, labels, show, show_size, to_layout
from pseudoformer.frontend.values import MaskDef, SizeVal, Val
from pseudoformer.ir import DType, Op


@handles("index")
def _index(f: Frame, e: Expr) -> Val:
    return index(f, ev(f, e.args[0]), e.args[1], e)


def index(f: Frame, base: Any, items: tuple, e: Expr) -> Val:
    if isinstance(base, MaskDef):
        raise f.error(BadTypeError, "internal: unevaluated mask", e.pos)
    if not isinstance(base, Val):
        raise f.error(BadTypeError, f"{describe(e.args[0])} cannot be indexed", e.pos)
    v = base
    distinct_index_vars(f, items)
    if len(items) != len(v.dims):
        if v.const is not None and not v.dims:
            return v  # Mask ≡ 1 indexed entry-wise is still 1
        raise f.error(ShapeError, f"{describe(e.args[0])} is {show(v)}: it takes {len(v.dims)} indices, "
                      f"not {len(items)}", e.pos)
    for i in reversed(range(len(items))):
        it = items[i]
        if it.op == "all":
            continue
        if it.op == "range":
            v = _slice(f, v, i, it, base, e)
            continue
        if it.op == "name" and it.text in f.maps:
            mv = f.maps[it.text]
            d = v.dims[i]
            if mv.size is None:
                mv.size = d
            elif f.b.resolve(mv.size) != f.b.resolve(d):
                if f.b.resolve(d) == BROADCAST:
                    pass
                else:
                    v = _slice_prefix(f, v, i, mv.size, it)
            v = dim_to_free(f.b, v, i, mv.internal)
            continue
        run = run_of(f, it) if it.op != "name" else None
        if run is not None and f.b.resolve(v.dims[i]) != BROADCAST:
            inside = in_range(run, f.b.resolve(v.dims[i]))
            if inside is False:
                n = show_size(f.b.resolve(v.dims[i]))
                raise f.error(ShapeError, f"{describe(e.args[0])} is {show(base)}: the index {source_text(f, it)} "
                              f"for {run.var} ∈ [{show_size(run.count)}] runs over positions {_one_based(run)}, "
                              f"outside the {n} of its {_ordinal(i)} axis", it.pos)
            if inside or inside is None and f.root().symbolic:  # checking without a config: d/2 < d unprovable
                v = _read_run(f, v, i, run, it)
                continue
        extent = f.b.resolve(v.dims[i])
        static = static_int(f, it)  # x[⌈ℓ/2⌉], x[ℓ − ⌊ℓ/3⌋]: sizes and integer expressions of them
        if static is None:
            computed = linear_index(f, it, extent, f"{describe(e.args[0])} is {show(base)}") \
                if extent != BROADCAST else None
            if computed is not None:
                v = _gather(f, v, i, computed, it)
                continue
            idx = ev(f, it)
        else:
            static = f.b.resolve(static)
            idx = const(f, static.value) if static.is_int else SizeVal(static)
        if isinstance(idx, SizeVal):
            idx = Val(f.b.node(Op.SUB, size_node(f, idx.size, it.pos), f.b.const(1, DType.int64)), "index")
        elif isinstance(idx, Val) and idx.kind == "real" and isinstance(idx.const, (int, float)):
            k = int(idx.const) if math.isfinite(idx.const) else 0
            if k != idx.const or k < 1:
                raise f.error(BadTypeError, f"index {idx.const} is not a position (they count from 1)", it.pos)
            if extent.is_int and k > extent.value:
                raise f.error(ShapeError, f"{describe(e.args[0])} is {show(base)}: index {k} is past the "
                              f"{extent.value} of its {_ordinal(i)} axis", it.pos)
            idx = Val(f.b.const(k - 1, DType.int64), "index")
        elif isinstance(idx, Val) and idx.kind == "real" and not idx.dims and extent != BROADCAST:
            idx = real_index(f, idx, extent, it.pos)  # ⌈t/2⌉, p[t] + 1: checked when the model runs
        if not isinstance(idx, Val) or idx.kind not in ("token", "index") or idx.dims:
            raise f.error(BadTypeError, f"{describe(it)} is {shown(idx)}, not an index (a position or a token id)",
                          it.pos)
        v = _gather(f, v, i, idx, it)
    return v


def _slice(f: Frame, v: Val, i: int, it: Expr, base: Val, e: Expr) -> Val:
    """X[:, a:b], x[ℓ + 1 : ℓ + ℓ_gen]: positions a to b (from 1, both included) of one axis, one SLICE. The
    bounds are sizes or integer expressions of them, run-time ones (ℓ) included, so the length is a size."""
    lo_e, hi_e = it.args
    bounds = [static_int(f, b) for b in (lo_e, hi_e)]
    for b, got in zip((lo_e, hi_e), bounds, strict=True):
        if got is None:
            raise f.error(BadTypeError, f"the bounds of a slice a:b are sizes or integer expressions of sizes "
                          f"(1 : ℓ − 1, ℓ + 1 : ℓ + ℓ_gen), so that its length is known before the model runs; "
                          f"{describe(b)} is not: for positions read from data, mask with an Iverson bracket "
                          f"([[a ≤ t ≤ b]])", b.pos)
    lo, hi = (f.b.resolve(b) for b in bounds)  # type: ignore[arg-type]
    extent = f.b.resolve(v.dims[i])
    count = f.b.resolve(hi - lo + 1)
    what = f"{describe(e.args[0])} is {show(base)}: the slice {source_text(f, it)}"
    if proven(lo - 1) is False:
        raise f.error(ShapeError, f"{what} starts at {show_size(lo)}; positions count from 1", it.pos)
    if proven(count - 1) is False:
        raise f.error(ShapeError, f"{what} is empty or runs backwards ({show_size(lo)} to {show_size(hi)})", it.pos)
    if extent != BROADCAST and proven(extent - hi) is False:
        raise f.error(ShapeError, f"{what} ends at {show_size(hi)}, past the {show_size(extent)} of its "
                      f"{_ordinal(i)} axis", it.pos)
    node = f.b.node(Op.SLICE, v.node, poly_node(f, lo - 1, it.pos), poly_node(f, hi, it.pos),
                    axis=v.paper_axis0 + i, dim=count.dim())
    return replace(v, node=node, dims=v.dims[:i] + (count,) + v.dims[i + 1:], const=None)


def distinct_index_vars(f: Frame, items: Any) -> None:
    """S[t, t] would be a diagonal, which the column-map vectorisation cannot express."""
    seen: set[str] = set()
    for it in items:
        if it.op == "name" and it.text in f.maps:
            if it.text in seen:
                raise f.error(BadTypeError, f"the index {it.text} appears twice; diagonals are not supported", it.pos)
            seen.add(it.text)


def _read_run(f: Frame, v: Val, i: int, run: Run, it: Expr) -> Val:
    """X[i + d/2, t]: a slice of the axis (a strided run is a gather of known, in-range positions)."""
    internal = f.maps[run.var].internal
    if internal in v.free_vars:
        raise f.error(BadTypeError, f"the index {run.var} appears twice; diagonals are not supported", it.pos)
    axis = v.paper_axis0 + i
    if run.stride == 1:
        stop = poly_node(f, run.start + run.count, it.pos)
        node = f.b.node(Op.SLICE, v.node, poly_node(f, run.start, it.pos), stop, axis=axis, dim=run.count.dim())
    else:
        node = f.b.node(Op.GATHER, v.node, run_positions(f, run, it.pos), axis=axis)
    dims = v.dims[:i] + (run.count,) + v.dims[i + 1:]
    return dim_to_free(f.b, replace(v, node=node, dims=dims, const=None), i, internal)


def _one_based(run: Run) -> str:
    return f"{show_size(run.start + 1)} to {show_size(last(run) + 1)}"


def _ordinal(i: int) -> str:
    return ("first", "second", "third")[i] if i < 3 else f"{i + 1}th"


def source_text(f: Frame, e: Expr) -> str:
    """The expression as written in the source line (for messages), or its description."""
    mod = f.prog.modules.get(e.pos.file)
    return describe(e) if mod is None else _span_text(mod.line(e.pos.line), e.pos.col - 1)


def _span_text(line: str, start: int) -> str:
    """The text of the index starting at `start`, up to the `,` or `]` that closes it."""
    depth = 0
    for k in range(start, len(line)):
        ch = line[k]
        if ch in "([{⌈⌊":
            depth += 1
        elif ch in ")]}⌉⌋":
            if depth == 0:
                return line[start:k].strip()
            depth -= 1
        elif ch == "," and depth == 0:
            return line[start:k].strip()
    return line[start:].strip()


def _slice_prefix(f: Frame, v: Val, i: int, size: Size, it: Expr) -> Val:
    """X[:, t] with t ∈ [ℓ] on a matrix of ℓ_max columns: its first ℓ columns."""
    axis = v.paper_axis0 + i
    start = f.b.const(0, DType.int64)
    stop = size_node(f, size, it.pos)
    node = f.b.node(Op.SLICE, v.node, start, stop, axis=axis, dim=f.b.resolve(size).dim())
    dims = v.dims[:i] + (size,) + v.dims[i + 1:]
    whole, run = f.b.resolve(v.dims[i]), f.b.resolve(size)
    if whole.is_int and not run.is_int:
        name = str(run)
        old = f.b.limits.get(name)
        if old is None or whole.value < old[0]:
            f.b.limits[name] = (whole.value, f"the position {it.text} indexes a matrix of {whole.value} columns "
                                             f"at line {it.pos.line} of {it.pos.file}")
    return replace(v, node=node, dims=dims, const=None)


def _gather(f: Frame, v: Val, i: int, idx: Val, it: Expr) -> Val:
    if v.batched and idx.batched or set(v.free_vars) & set(idx.free_vars):
        return gather_along(f, v, i, idx) or pick(f, v, i, idx, it)
    axis = v.paper_axis0 + i
    node = f.b.node(Op.GATHER, v.node, idx.node, axis=axis)
    vl = labels(v)
    il = [("b", None) if lab[0] == "b" else lab for lab in labels(idx)]
    pos = vl.index(("d", i))
    cur = vl[:pos] + il + vl[pos + 1:]
    batched = v.batched or idx.batched
    dims_left = [x for x in range(len(v.dims)) if x != i]
    target = [("b", None)] * batched + [("d", x) for x in dims_left]
    target += [("f", n) for n, _ in v.free] + [("f", n) for n, _ in idx.free]
    tmp = Val(node, v.kind, v.dims, v.free + idx.free, batched)
    out = to_layout(f.b, tmp, target, own=cur)
    return Val(out, v.kind, tuple(v.dims[x] for x in dims_left), v.free + idx.free, batched)
