"""Assignment at computed positions: `for t ∈ [m] : Y[:, p[t]] ← V[:, t]` replaces the columns p[1], …,
p[m] of Y by V's — one SCATTER, used only where no slice, concatenation or interleave expresses the
assignment (frontend/pieces.py).

The positions are checked when the model runs: each must be a whole number in [1, n] and none may
repeat, or the graph turns every position into n, which every backend's scatter refuses (the
interpreter itself, ONNX Runtime's ScatterElements, and TVM's assert before its scatter_elements),
so no entry is written at a wrapped-around position or twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pseudoformer.frontend.ast import Expr, Stmt
from pseudoformer.frontend.errors import BadTypeError
from pseudoformer.frontend.expressions.affine import poly_node
from pseudoformer.frontend.expressions.computed_index import guarded, real_index
from pseudoformer.frontend.expressions.forms import ev
from pseudoformer.frontend.frame import Frame, MapVar
from pseudoformer.frontend.sizes import ONE
from pseudoformer.frontend.tensor_ops import cast_real, per_example, show, to_layout
from pseudoformer.frontend.values import Label, Val
from pseudoformer.ir import DType, Op

Place = Callable[[Frame, Val, list, Stmt], Val]


def scatter_into(f: Frame, name: str, existing: Any, items: list, k: int, value: Val, s: Stmt,
                 place: Place) -> Val:
    """`existing` with the entries the target names replaced: items[k] is the computed position."""
    it: Expr = items[k]
    if not isinstance(existing, Val):
        raise f.error(BadTypeError, f"{name}[…] at computed positions updates {name}, which has no value yet; "
                      f"assign the whole of {name} first", it.pos)
    if len(existing.dims) != len(items):
        raise f.error(BadTypeError, f"{name} is {show(existing)}; it takes {len(existing.dims)} indices", it.pos)
    idx = ev(f, it)
    if isinstance(idx, Val) and not idx.dims and not idx.free:  # Y[:, p] ← v: one position, a map over [1]
        internal = f.b.fresh(_ONE)
        f.maps[_ONE] = MapVar(internal, ONE)
        try:
            one = replace(idx, node=f.b.node(Op.UNSQUEEZE, idx.node, axes=[idx.node.type.rank]),
                          free=((internal, ONE),))
            return _scatter(f, name, existing, items, k, value, s, place, one, _ONE)
        finally:
            del f.maps[_ONE]
    internals = {m.internal: v for v, m in f.maps.items()}
    if not isinstance(idx, Val) or idx.dims or len(idx.free) != 1 or idx.free[0][0] not in internals:
        used = sorted(v for v, m in f.maps.items() if isinstance(idx, Val) and m.internal in idx.free_vars)
        raise f.error(BadTypeError, f"a computed target position names the columns one map variable runs over; "
                      f"this one depends on {' and '.join(used) or 'something that is not a position'}: write one "
                      "assignment per variable (`for t ∈ [m] : Y[:, p[t]] ← V[:, t]`), or compute the whole "
                      "matrix as a value", it.pos)
    return _scatter(f, name, existing, items, k, value, s, place, idx, internals[idx.free[0][0]])


_ONE = "⟨position⟩"  # the map over the single position `Y[:, p] ← v` writes; no name can contain it


def _scatter(f: Frame, name: str, existing: Val, items: list, k: int, value: Val, s: Stmt, place: Place,
             idx: Val, var: str) -> Val:
    it: Expr = items[k]
    if any(o.op == "name" and o.text == var for o in items):
        raise f.error(BadTypeError, f"the index {var} appears twice; diagonals are not supported", it.pos)
    extent = f.b.resolve(existing.dims[k])
    pos = real_index(f, idx, extent, it.pos) if idx.kind == "real" else guarded(f, idx, extent, it.pos)
    targets = [("", None) if o.op == "all" else (o.text, None) if j != k else (var, None)
               for j, o in enumerate(items)]
    if existing.batched and not value.batched:  # the same entries for every example, written into each
        value = per_example(f.b, cast_real(f.b, value))
    upd = place(f, value, targets, s)
    if upd.free != existing.free or upd.batched and not existing.batched:
        raise f.error(BadTypeError, f"the entries assigned ({show(upd)}) and {name} ({show(existing)}) differ in "
                      "the indices or examples they depend on", s.pos)
    pos = _distinct(f, pos, extent, it)
    lead = [("b", None)] * pos.batched + [("f", pos.free[0][0])]
    axis = existing.paper_axis0 + k
    target: list[Label] = [("b", None)] * existing.batched + [("d", i) for i in range(len(existing.dims))]
    target += [("f", n) for n, _ in existing.free]
    node = f.b.node(Op.SCATTER, existing.node, to_layout(f.b, pos, lead), to_layout(f.b, upd, target), axis=axis)
    return replace(existing, node=node, const=None)


def _distinct(f: Frame, pos: Val, extent: Any, it: Expr) -> Val:
    """The positions, or all of them n (which the scatter refuses) where two of them are equal: the
    equal pairs of an m-vector number m exactly when its entries differ (m² comparisons; m is a length)."""
    a = pos.paper_axis0  # the map variable's axis: positions have no dims
    col = f.b.node(Op.UNSQUEEZE, pos.node, axes=[a + 1])
    row = f.b.node(Op.UNSQUEEZE, pos.node, axes=[a])
    same = f.b.node(Op.CAST, f.b.node(Op.EQ, col, row), dtype=DType.int64)
    pairs = f.b.node(Op.REDUCE_SUM, same, axes=[a, a + 1], keepdims=False)
    ok = f.b.node(Op.EQ, pairs, f.b.node(Op.DIM, pos.node, axis=a))
    if pos.batched:  # one verdict per example, for all its positions
        ok = f.b.node(Op.UNSQUEEZE, ok, axes=[1])
    node = f.b.node(Op.WHERE, ok, pos.node, poly_node(f, extent, it.pos))
    return replace(pos, node=node)
