"""Indexing: X[:, t] over a map variable, a prefix of positions, and gathers at computed positions or token ids."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from pseudoformer.frontend.ast import Expr
from pseudoformer.frontend.errors import BadTypeError, ShapeError
from pseudoformer.frontend.expressions.core import describe, ev, handles, shown, size_node
from pseudoformer.frontend.frame import Frame
from pseudoformer.frontend.sizes import BROADCAST, Size
from pseudoformer.frontend.tensor_ops import dim_to_free, labels, show, to_layout
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
        idx = ev(f, it)
        if isinstance(idx, SizeVal):
            idx = Val(f.b.node(Op.SUB, size_node(f, idx.size, it.pos), f.b.const(1, DType.int64)), "index")
        elif isinstance(idx, Val) and idx.kind == "real" and isinstance(idx.const, (int, float)):
            k = int(idx.const) if math.isfinite(idx.const) else 0
            if k != idx.const or k < 1:
                raise f.error(BadTypeError, f"index {idx.const} is not a position (they count from 1)", it.pos)
            idx = Val(f.b.const(k - 1, DType.int64), "index")
        if not isinstance(idx, Val) or idx.kind not in ("token", "index") or idx.dims:
            raise f.error(BadTypeError, f"{describe(it)} is {shown(idx)}, not an index (a position or a token id)",
                          it.pos)
        v = _gather(f, v, i, idx, it)
    return v


def distinct_index_vars(f: Frame, items: Any) -> None:
    """S[t, t] would be a diagonal, which the column-map vectorisation cannot express."""
    seen: set[str] = set()
    for it in items:
        if it.op == "name" and it.text in f.maps:
            if it.text in seen:
                raise f.error(BadTypeError, f"the index {it.text} appears twice; diagonals are not supported", it.pos)
            seen.add(it.text)


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
    if v.batched and idx.batched:
        raise f.error(BadTypeError, "indexing per-example data with per-example indices is not supported", it.pos)
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
