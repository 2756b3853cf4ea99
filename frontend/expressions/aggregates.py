"""Σ sums, column lists [e_1, …, e_ℓ] and row stacks [Y¹; …; Y^H]."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pseudoformer.frontend.ast import Expr
from pseudoformer.frontend.errors import BadTypeError, ShapeError, UnknownNameError
from pseudoformer.frontend.expressions.core import (
    describe,
    ev,
    ev_val,
    handles,
    index_var_val,
    shown,
    size_val,
)
from pseudoformer.frontend.expressions.integers import static_int
from pseudoformer.frontend.expressions.lookup import key_with_placeholder, script_int
from pseudoformer.frontend.frame import Frame, MapVar
from pseudoformer.frontend.names import parse_name
from pseudoformer.frontend.sizes import ONE, Size
from pseudoformer.frontend.tensor_ops import (
    cast_real,
    elementwise,
    free_to_dim,
    per_example,
    product,
    reduce_free,
    show,
    to_layout,
    unary,
    unify,
)
from pseudoformer.frontend.values import Family, Val
from pseudoformer.ir import Op, TensorType


@handles("sum")
def _sum(f: Frame, e: Expr) -> Val:
    var, lo, hi, body = e.args
    size: Size | None = None
    if hi is not None:
        lo_v = ev(f, lo)
        if not (isinstance(lo_v, Val) and lo_v.const == 1):
            raise f.error(ShapeError, "a sum starts at 1 (partial sums are not supported)", lo.pos)
        size = static_int(f, hi)
        if size is None:
            return _sum_to_position(f, e)
        size = f.b.resolve(size)
        if size.is_int and size.value < 0:
            raise f.error(BadTypeError, f"this sum runs from 1 to {size.value}; its upper bound must be at least 0",
                          hi.pos)
    internal = f.b.fresh(var)
    saved = f.maps.get(var)
    f.maps[var] = MapVar(internal, size)
    try:
        v = ev_val(f, body)
        if v.kind == "index":  # positions summed as numbers count from 1, term by term
            v = cast_real(f.b, v)
    finally:
        mv = f.maps.pop(var)
        if saved is not None:
            f.maps[var] = saved
    if internal not in v.free_vars:
        if mv.size is None:
            raise f.error(BadTypeError, f"the sum over {var} does not use {var}, so its range is unknown", e.pos)
        return product(f.b, size_val(f, mv.size, e.pos), v)
    if size is not None:
        unify(f.b, size, v.free_size(internal), f"the range of {var}")
    return reduce_free(f.b, v, internal)


def _sum_to_position(f: Frame, e: Expr) -> Val:
    """`Σ_{u=1}^{t} x_u` with t a map variable: a prefix sum, one CUMSUM along u (linear in ℓ) when the term
    does not read t; any other bound that positions give (`Σ_{u=1}^{t−1}`, or a term that reads t) sums
    `[[u ≤ bound]] x_u` over all u, which is quadratic."""
    var, _, hi, body = e.args
    bound = ev(f, hi)
    if not isinstance(bound, Val) or bound.dims or not bound.free or \
            not {n for n, _ in bound.free} <= {m.internal for m in f.maps.values()}:
        raise f.error(BadTypeError, "a sum's upper bound is a size, an integer expression of sizes (ℓ − 1, "
                      "⌈d/2⌉) or of map variables (Σ_{u=1}^{t}, a prefix sum); for a bound read from data, "
                      "sum an Iverson bracket instead: Σ_u [[u ≤ b]] x_u", hi.pos)
    plain = hi.op == "name" and hi.text in f.maps and f.maps[hi.text].size is not None
    internal = f.b.fresh(var)
    saved = f.maps.get(var)
    f.maps[var] = MapVar(internal, f.maps[hi.text].size if plain else None)
    unranged = f.error(BadTypeError, f"this sum's upper bound changes with the positions, so {var} takes its range "
                       f"from what it indexes, and this term indexes nothing with {var}: write the sum over something "
                       f"{var} indexes, or a bound known before the positions", hi.pos)
    try:
        try:
            v = cast_real(f.b, ev_val(f, body))
        except BadTypeError as err:
            raise unranged if err.message.startswith(f"the range of {var} ") else err from None
        if internal not in v.free_vars:
            raise f.error(BadTypeError, f"the sum over {var} does not use {var}; write the count times the term",
                          e.pos)
        if plain and f.maps[hi.text].internal not in v.free_vars:
            axis = (1 if v.batched else 0) + len(v.dims) + v.free_vars.index(internal)
            t = f.maps[hi.text]
            free = tuple((t.internal if n == internal else n, sz) for n, sz in v.free)
            return Val(f.b.node(Op.CUMSUM, v.node, axis=axis), "real", v.dims, free, v.batched)
        u = index_var_val(f, var, e.pos)
    finally:
        f.maps.pop(var)
        if saved is not None:
            f.maps[var] = saved
    keep = elementwise(f.b, Op.LE, [cast_real(f.b, u), cast_real(f.b, bound)], "compare")
    masked = elementwise(f.b, Op.MUL, [cast_real(f.b, keep), v], "multiply")
    return reduce_free(f.b, masked, internal)


def _family_of(f: Frame, items: tuple, e: Expr) -> tuple[Any, list[str]]:
    """[e_1, e_2, …, e_ℓ] → the family e and the scripts that index it."""
    names = [it for it in items if it.op == "name"]
    if len(names) != len(items) - 1 or len(names) < 2 or items[-2].op != "ellipsis":
        raise f.error(BadTypeError, "write a family as [e_1, e_2, …, e_n]", e.pos)
    parsed = [parse_name(n.text) for n in names]
    first = parsed[0]
    for i, _ in enumerate(first.scripts):
        key = key_with_placeholder(first, i)
        if all(len(p.scripts) == len(first.scripts) and key_with_placeholder(p, i) == key for p in parsed):
            if key in f.vars:
                return f.vars[key], [p.scripts[i][1] for p in parsed]
            raise f.error(UnknownNameError, f"no family {names[0].text.split('_')[0]} has been assigned", e.pos)
    raise f.error(BadTypeError, "the items of a list with … must differ in one index", e.pos)


@handles("column_list")
def _column_list(f: Frame, e: Expr) -> Val:
    items = e.args
    if not any(it.op == "ellipsis" for it in items):
        cols = [ev_val(f, it) for it in items]
        for it, c in zip(items, cols, strict=True):
            _check_column(f, c, it, matrices=True)
        # a vector is one column, a matrix its columns: [x_cls, E] puts a class column before E's
        return _stack(f, [c if len(c.dims) == 2 else replace(c, node=f.b.node(Op.UNSQUEEZE, c.node,
                                                                                 axes=[c.paper_axis0 + 1]),
                                                               dims=c.dims + (ONE,)) for c in cols], axis=1, e=e)
    fam, scripts = _family_of(f, items, e)
    last = scripts[-1]
    if isinstance(fam, tuple):  # vectorised: (Val, vars)
        val, own = fam
        n = f.size_of_name(last, e.pos, create=False) if not last.isdigit() else Size.of(int(last))
        if n is None:
            raise f.error(UnknownNameError, f"unknown size {last}", e.pos)
        unify(f.b, n, val.free_size(own[0]), "the list's length")
        return free_to_dim(f.b, val, own[0])
    count = script_int(f, last, e.pos)
    if missing := _missing(fam, count):
        raise f.error(UnknownNameError, f"members {missing} of the list have not been assigned", e.pos)
    cols = [fam.members[(k,)] for k in range(1, count + 1)]
    for c in cols:
        _check_column(f, c, e)
    return _stack(f, [replace(c, node=f.b.node(Op.UNSQUEEZE, c.node, axes=[c.paper_axis0 + 1]),
                              dims=c.dims + (ONE,)) for c in cols], axis=1, e=e)


def _missing(fam: Family, count: int) -> str:
    """The members 1…count a family lacks, shown; found in time bounded by its size, not by `count`
    (a list [e_1, …, e_N] with N = 10⁹ must not loop 10⁹ times to say so)."""
    present = sum(1 for k in fam.members if len(k) == 1 and isinstance(k[0], int) and 1 <= k[0] <= count)
    if present == count:
        return ""
    gaps = []
    k = 1
    while len(gaps) < 5 and k <= count:
        if (k,) not in fam.members:
            gaps.append(k)
        k += 1
    return "[" + ", ".join(map(str, gaps)) + (", …]" if count - present > len(gaps) else "]")


def _check_column(f: Frame, c: Any, it: Expr, matrices: bool = False) -> None:
    if not isinstance(c, Val) or len(c.dims) not in ((1, 2) if matrices else (1,)):
        what = "vectors and matrices" if matrices else "vectors"
        raise f.error(ShapeError, f"a list [a, b, …] puts {what} side by side as columns; {describe(it)} is "
                      f"{shown(c)}", it.pos)


@handles("row_stack")
def _row_stack(f: Frame, e: Expr) -> Val:
    items = e.args
    if not any(it.op == "ellipsis" for it in items):
        return _stack(f, [ev_val(f, it) for it in items], axis=0, e=e)
    fam, scripts = _family_of(f, items, e)
    if not isinstance(fam, Family):
        raise f.error(BadTypeError, "row-stacking needs a family assigned in a loop", e.pos)
    last = scripts[-1]
    s = f.size_of_name(last, e.pos, create=False) if not last.isdigit() else Size.of(int(last))
    if s is not None and not f.b.resolve(s).is_int:
        # checking without a config: one member stands for all
        m = next(iter(fam.members.values()))
        if not isinstance(m, Val) or not m.dims:
            raise f.error(ShapeError, f"only vectors and matrices can be stacked, not {shown(m)}", e.pos)
        dims = (m.dims[0] * f.b.resolve(s),) + m.dims[1:]
        shape = list(m.node.type.shape)
        shape[m.paper_axis0] = dims[0].dim()
        node = f.b.node(Op.CONCAT, m.node, axis=m.paper_axis0, type=TensorType(m.node.dtype, tuple(shape)))
        return replace(m, node=node, dims=dims)
    count = script_int(f, last, e.pos)
    if missing := _missing(fam, count):
        raise f.error(UnknownNameError, f"members {missing} of the stack have not been assigned", e.pos)
    return _stack(f, [fam.members[(k,)] for k in range(1, count + 1)], axis=0, e=e)


def _stack(f: Frame, vals: list[Val], axis: int, e: Expr) -> Val:
    if not all(isinstance(v, Val) for v in vals):
        raise f.error(BadTypeError, "only vectors and matrices can be stacked", e.pos)
    if len({len(v.dims) for v in vals}) != 1 or len({v.free_vars for v in vals}) != 1:
        raise f.error(ShapeError, f"the stacked values differ in shape: {', '.join(show(v) for v in vals)}", e.pos)
    rank = len(vals[0].dims)
    if rank <= axis:
        raise f.error(ShapeError, f"only vectors and matrices can be stacked, not {show(vals[0])}", e.pos)
    for k in range(rank):
        if k != axis:
            for v in vals[1:]:
                unify(f.b, vals[0].dims[k], v.dims[k], "stacking")
    batched = any(v.batched for v in vals)
    if batched:  # a learned column or row beside per-example ones is repeated for every example
        vals = [per_example(f.b, v) for v in vals]
    target = [("b", None)] * batched + [("d", i) for i in range(rank)] + [("f", n) for n, _ in vals[0].free]
    nodes = [to_layout(f.b, v, target) for v in vals]
    total = vals[0].dims[axis]
    for v in vals[1:]:
        total = total + v.dims[axis]
    dims = vals[0].dims[:axis] + (total,) + vals[0].dims[axis + 1:]
    concat_axis = (1 if batched else 0) + axis
    explicit = None
    if not total.is_int:
        # Symbolic sizes: name the stacked size as the Size algebra does (2·?d_mid, not ?d_mid+?d_mid; d, not
        # 1+-1 + d for [X[1:1, :]; X[2:d, :]]), so a parameter declared with H·d_mid meets the same dim.
        shape = list(nodes[0].type.shape)
        shape[concat_axis] = total.dim()
        explicit = TensorType(nodes[0].dtype, tuple(shape))
    node = f.b.node(Op.CONCAT, *nodes, axis=concat_axis, type=explicit)
    return Val(node, vals[0].kind, dims, vals[0].free, batched)


@handles("extremum")
def _extremum(f: Frame, e: Expr) -> Val:
    """`max_{j ∈ [E]} G[j, t]`, `min_j …`: a reduction over j; `argmax_j …` the position (from 1) of the
    first largest entry. The range is the one given, or that of what j indexes."""
    var, bound, body = e.args
    v, internal = over_index(f, e, var, bound, body, f"takes the {e.text.removeprefix('arg')} over {var}")
    return extremum_over(f, v, internal, e.text)


def over_index(f: Frame, e: Expr, var: str, bound: Expr | None, body: Expr, does: str) -> tuple[Val, str]:
    """The term after `max_{j ∈ [E]}` (or `top-k_j`) evaluated with j a fresh free variable over its range (the
    one given, or that of what j indexes): (its value, j's internal name). A term without j is an error saying
    what the operator `does` over j."""
    size = None
    if bound is not None:
        size = static_int(f, bound)
        if size is None:
            raise f.error(BadTypeError, f"the range of {e.text}_{{{var} ∈ […]}} must be a size known before the "
                          f"positions are, as `{e.text}_{{{var} ∈ [E]}}`", bound.pos)
        size = f.b.resolve(size)
    internal = f.b.fresh(var)
    saved = f.maps.get(var)
    f.maps[var] = MapVar(internal, size)
    try:
        v = cast_real(f.b, ev_val(f, body))
    finally:
        f.maps.pop(var)
        if saved is not None:
            f.maps[var] = saved
    if internal not in v.free_vars:
        raise f.error(BadTypeError, f"{e.text}_{var} {does}, and this term does not use {var}", e.pos)
    if size is not None:
        unify(f.b, size, v.free_size(internal), f"the range of {var}")
    return v, internal


def extremum_over(f: Frame, v: Val, internal: str, word: str) -> Val:
    """max, min, argmax or argmin of v over its free variable `internal` (REDUCE_MAX; min as −max(−v))."""
    lowest = word.endswith("min")
    x = unary(f.b, Op.NEG, v) if lowest else v
    axis = (1 if x.batched else 0) + len(x.dims) + x.free_vars.index(internal)
    best = f.b.node(Op.REDUCE_MAX, x.node, axes=[axis], keepdims=word.startswith("arg"))
    rest = tuple(fr for fr in x.free if fr[0] != internal)
    if not word.startswith("arg"):
        node = unary(f.b, Op.NEG, Val(best, "real")).node if lowest else best
        return Val(node, "real", x.dims, rest, x.batched)
    # the first position where the extremum is reached: min over j of (j where x = best, else n)
    n = x.node.type.shape[axis]
    count = f.b.node(Op.DIM, x.node, axis=axis)
    ids = f.b.node(Op.ARANGE, count, dim=n)
    ids = f.b.node(Op.UNSQUEEZE, ids, axes=[k for k in range(x.node.type.rank) if k != axis]) \
        if x.node.type.rank > 1 else ids
    picked = f.b.node(Op.WHERE, f.b.node(Op.EQ, x.node, best), ids, count)
    # min(picked) = n − max(n − picked), in int64 (NEG is for floats)
    first = f.b.node(Op.SUB, count, f.b.node(Op.REDUCE_MAX, f.b.node(Op.SUB, count, picked), axes=[axis],
                                             keepdims=False))
    return Val(first, "index", x.dims, rest, x.batched)
