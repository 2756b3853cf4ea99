"""Computed indices: `w[t_x − t_z + ℓ_max]`, `v[⌈t/2⌉]`, `X[:, p[t]]` — gathers at positions the graph computes.

An index that is linear in map variables is computed in int64 from their ranges (Σ c·arange + k);
any other integer-valued expression (of data, ⌊⌋, mod, …) is computed as the reals the rest of the
notation uses and converted. The compiler bounds a linear index over its variables' ranges: one that
provably leaves the axis somewhere is a diagnostic at the index, one provably inside is gathered as
it is. Every other index is checked at run time: where it is not a whole number in [1, n], the
graph replaces it by n, one past the end, which every backend refuses with an error naming the
gather — the interpreter (numpy's IndexError, with the op's source line), ONNX Runtime (its Gather
kernel rejects indices outside [−n, n − 1]) and TVM (the assert before its gathers, backends/tvm).
Negative indices, which numpy and ONNX would read from the end, never reach the gather.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pseudoformer.frontend.ast import Expr
from pseudoformer.frontend.errors import BadTypeError, ShapeError
from pseudoformer.frontend.expressions.affine import Linear, linear, poly_node, proven
from pseudoformer.frontend.expressions.core import index_var_val
from pseudoformer.frontend.frame import Frame
from pseudoformer.frontend.sizes import Size
from pseudoformer.frontend.tensor_ops import cast_real, dim_to_free, elementwise, reduce_free, show_size
from pseudoformer.frontend.values import Val
from pseudoformer.ir import DType, Op


def linear_index(f: Frame, it: Expr, extent: Size, what: str) -> Val | None:
    """A linear index over several map variables as 0-based int64 positions, checked against [1, extent]
    at compile time where the sizes decide it, else at run time; None if `it` is not such an index."""
    lin = linear(f, it)
    if lin is None or not lin.coef or any(f.maps[v].size is None for v, _ in lin.coef):
        return None
    lo, hi = _bounds(f, lin)
    low_ok, high_ok = proven(lo - 1), proven(extent - hi)
    if low_ok is False or high_ok is False:
        over = f"from {show_size(lo)}" if low_ok is False else f"up to {show_size(hi)}"
        ranges = ", ".join(f"{v} ∈ [{show_size(f.b.resolve(f.maps[v].size))}]" for v, _ in lin.coef)
        raise f.error(ShapeError, f"{what}: the index reaches {over} for {ranges}, outside 1 … "
                      f"{show_size(extent)}", it.pos)
    idx: Val | None = None
    for var, c in lin.coef:
        term = index_var_val(f, var, it.pos)
        if c != 1:
            term = elementwise(f.b, Op.MUL, [term, _int(f, c)], "multiply", kind="index")
        idx = term if idx is None else elementwise(f.b, Op.ADD, [idx, term], "add", kind="index")
    assert idx is not None
    k = f.b.resolve(lin.offset + sum(c for _, c in lin.coef) - 1)
    if k != Size.of(0):
        idx = elementwise(f.b, Op.ADD, [idx, Val(poly_node(f, k, it.pos), "index")], "add", kind="index")
    if low_ok and high_ok:
        return idx
    return guarded(f, idx, extent, it.pos)


def real_index(f: Frame, x: Val, extent: Size, pos: Any) -> Val:
    """A real-valued index (the notation computes with reals) as 0-based int64 positions, checked at run
    time to be a whole number in [1, extent]."""
    as_int = f.b.node(Op.CAST, x.node, dtype=DType.int64)
    whole = f.b.node(Op.EQ, f.b.node(Op.CAST, as_int, dtype=DType.float32), x.node)
    idx = Val(f.b.node(Op.SUB, as_int, f.b.const(1, DType.int64)), "index", x.dims, x.free, x.batched)
    return guarded(f, idx, extent, pos, Val(whole, "bool", x.dims, x.free, x.batched))


def guarded(f: Frame, idx: Val, extent: Size, pos: Any, whole: Val | None = None) -> Val:
    """idx where it is inside [0, extent), else extent: an index every backend refuses, never one that wraps."""
    n = Val(poly_node(f, extent, pos), "index")
    ok = elementwise(f.b, Op.AND, [elementwise(f.b, Op.GE, [idx, _int(f, 0)], "compare"),
                                   elementwise(f.b, Op.LT, [idx, n], "compare")], "and", kind="bool")
    if whole is not None:
        ok = elementwise(f.b, Op.AND, [ok, whole], "and", kind="bool")
    return elementwise(f.b, Op.WHERE, [ok, idx, n], "select", kind="index")


def _int(f: Frame, k: int) -> Val:
    return Val(f.b.const(k, DType.int64), "index")


def _bounds(f: Frame, lin: Linear) -> tuple[Size, Size]:
    """The least and greatest value of a linear index, each variable v running over 1 … n_v."""
    lo = hi = lin.offset
    for var, c in lin.coef:
        n = f.b.resolve(f.maps[var].size)
        lo, hi = (lo + c, hi + n * c) if c > 0 else (lo + n * c, hi + c)
    return f.b.resolve(lo), f.b.resolve(hi)


def pick(f: Frame, v: Val, i: int, idx: Val, it: Expr) -> Val:
    """v[idx] along dim i where the index varies with what v varies with: P[x[t + 1], t] (each example's
    own tokens, each position's own row). Not a gather, whose indices index every column alike: the
    entries where [[row = idx]], summed over the rows — one pass over v, as a gather's output would be
    read. A gather of the positions themselves first makes an index outside [1, n] an error there."""
    if v.kind != "real":
        raise f.error(BadTypeError, "indexing per-example data with per-example indices needs real values",
                      it.pos)
    extent = f.b.resolve(v.dims[i])
    n = poly_node(f, extent, it.pos)
    rows = f.b.node(Op.ARANGE, n, dim=extent.dim())
    checked = f.b.node(Op.GATHER, rows, guarded(f, idx, extent, it.pos).node, axis=0)  # refuses n
    row_var = f.b.fresh("row")
    same = elementwise(f.b, Op.EQ, [Val(rows, "index", (), ((row_var, extent),)), replace(idx, node=checked)],
                       "compare")
    spread = dim_to_free(f.b, v, i, row_var)
    picked = elementwise(f.b, Op.MUL, [cast_real(f.b, same), spread], "multiply")
    return reduce_free(f.b, picked, row_var)
