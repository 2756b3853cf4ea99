"""Expressions → Vals: names, arithmetic, products, indexing, sums, lists, Iverson brackets and builtins."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from pseudoformer.errors import AlgError
from pseudoformer.frontend.ast import Expr
from pseudoformer.frontend.errors import BadTypeError, ShapeError, UnknownNameError
from pseudoformer.frontend.frame import Frame, MapVar
from pseudoformer.frontend.names import parse_name
from pseudoformer.frontend.params import GroupVal
from pseudoformer.frontend.sizes import BROADCAST, ONE, Size
from pseudoformer.frontend.tensor_ops import (
    ShapeMismatch,
    cast_real,
    dim_to_free,
    elementwise,
    free_to_dim,
    labels,
    product,
    reduce_free,
    show,
    softmax_columns,
    to_layout,
    transpose,
    unary,
    unify,
)
from pseudoformer.frontend.values import Family, MaskDef, SizeVal, Val
from pseudoformer.ir import DType, Op, TensorType

UNARY_BUILTINS = {"exp": Op.EXP, "log": Op.LOG, "sqrt": Op.SQRT, "tanh": Op.TANH, "erf": Op.ERF, "sin": Op.SIN,
                  "cos": Op.COS, "abs": Op.ABS, "ReLU": Op.RELU, "relu": Op.RELU, "GELU": Op.GELU, "gelu": Op.GELU}
BUILTINS = set(UNARY_BUILTINS) | {"softmax", "length"}
REL_OPS = {"<": Op.LT, "<=": Op.LE, ">": Op.GT, ">=": Op.GE, "==": Op.EQ, "!=": Op.NE}


def const(f: Frame, value: float) -> Val:
    return Val(f.b.const(float(value)), "real", const=value)


def size_val(f: Frame, s: Size, pos: Any) -> Val:
    """A size used as a number in arithmetic."""
    s = f.b.resolve(s)
    if s.is_int:
        return const(f, s.value)
    return Val(f.b.node(Op.CAST, size_node(f, s, pos), dtype=DType.float32), "real")


def size_node(f: Frame, s: Size, pos: Any) -> Any:
    s = f.b.resolve(s)
    if s.is_int:
        return f.b.const(s.value, DType.int64)
    name = str(s)
    if name in f.b.run_dims:
        return f.b.run_dims[name]
    if f.root().symbolic:
        return f.b.const(1, DType.int64)
    raise f.error(ShapeError, f"the size {name} is not known at run time", pos)


def ev(f: Frame, e: Expr) -> Any:
    """Evaluate an expression; returns a Val, or a SizeVal / GroupVal / Family where the expression names one."""
    try:
        return _ev(f, e)
    except ShapeMismatch as m:
        raise f.shape_error(m, e.pos) from None


def ev_val(f: Frame, e: Expr) -> Val:
    v = ev(f, e)
    if isinstance(v, SizeVal):
        return size_val(f, v.size, e.pos)
    if isinstance(v, Val):
        return v
    what = "a parameter group" if isinstance(v, GroupVal) else "a family of values"
    raise f.error(BadTypeError, f"{describe(e)} is {what}, not a value", e.pos)


def describe(e: Expr) -> str:
    """An expression as a message names it: `x`, `exp(…)`, `x[…]`; the tag alone (`index`) reads as nonsense."""
    if e.op == "call":
        return f"{e.text}(…)"
    if e.op == "index":
        return f"{describe(e.args[0])}[…]"
    if e.op == "transpose":
        return f"{describe(e.args[0])}ᵀ"
    return e.text or "this expression"


def _ev(f: Frame, e: Expr) -> Any:
    op = e.op
    if op == "number":
        return const(f, e.args[0])
    if op == "inf":
        return const(f, math.inf)
    if op == "name":
        return lookup(f, e.text, e.pos)
    if op in ("add", "sub", "div", "hadamard"):
        x, y = ev_val(f, e.args[0]), ev_val(f, e.args[1])
        if x.const is not None and y.const is not None and isinstance(x.const, (int, float)) \
                and isinstance(y.const, (int, float)) and op != "hadamard":
            return _fold(f, op, x.const, y.const)
        opc = {"add": Op.ADD, "sub": Op.SUB, "div": Op.DIV, "hadamard": Op.MUL}[op]
        what = {"add": "add", "sub": "subtract", "div": "divide", "hadamard": "multiply element-wise"}[op]
        return elementwise(f.b, opc, [cast_real(f.b, x), cast_real(f.b, y)], what)
    if op in ("juxt", "matmul"):
        x, y = ev_val(f, e.args[0]), ev_val(f, e.args[1])
        if x.const is not None and y.const is not None and not x.dims and not y.dims:
            return _fold(f, "mul", x.const, y.const)
        return product(f.b, cast_real(f.b, x), cast_real(f.b, y))
    if op == "neg":
        x = ev_val(f, e.args[0])
        if isinstance(x.const, (int, float)) and not isinstance(x.const, bool):
            return const(f, -x.const)
        return unary(f.b, Op.NEG, x)
    if op == "sqrt":
        x = ev_val(f, e.args[0])
        if isinstance(x.const, (int, float)) and not isinstance(x.const, bool):
            return const(f, math.sqrt(x.const))
        return unary(f.b, Op.SQRT, x)
    if op == "power":
        x = ev_val(f, e.args[0])
        return _power(f, x, e.args[1])
    if op == "real_power":
        raise f.error(BadTypeError, "a power other than a whole number (p^{1/τ}) is only for sampling, in an "
                      "inference algorithm: sample a token y from q ∝ p^{1/τ}", e.pos)
    if op == "transpose":
        if e.args[0].op == "number" and e.args[0].args[0] == 1:
            # 1ᵀ: a row of ones whose length is whatever it meets
            return Val(f.b.node(Op.UNSQUEEZE, f.b.const(1.0), axes=[0, 1]), "real", (ONE, BROADCAST), const="ones_row")
        return transpose(f.b, ev_val(f, e.args[0]))
    if op == "index":
        return index(f, ev(f, e.args[0]), e.args[1], e)
    if op == "call":
        return call_expr(f, e)
    if op == "sum":
        return _sum(f, e)
    if op == "column_list":
        return _column_list(f, e)
    if op == "row_stack":
        return _row_stack(f, e)
    if op == "iverson":
        v = ev_val(f, e.args[0])
        if isinstance(v.const, bool):
            return const(f, 1.0 if v.const else 0.0)
        return v  # a {0,1} value; arithmetic casts it to ℝ where it meets reals
    if op == "compare":
        return _compare(f, e)
    if op == "not":
        v = ev_val(f, e.args[0])
        if isinstance(v.const, bool):
            return _bool(f, not v.const)
        return unary(f.b, Op.NOT, _to_bool(f, v, e))
    if op in ("and", "or"):
        x, y = (_to_bool(f, ev_val(f, a), a) for a in e.args)
        return elementwise(f.b, Op.AND if op == "and" else Op.OR, [x, y], op, kind="bool")
    raise f.error(BadTypeError, f"{op} cannot be used here", e.pos)


def _fold(f: Frame, op: str, x: float, y: float) -> Val:
    if op == "add":
        return const(f, x + y)
    if op == "sub":
        return const(f, x - y)
    if op == "mul":
        return const(f, x * y)
    return const(f, x / y if y else math.copysign(math.inf, x))


def _bool(f: Frame, value: bool) -> Val:
    return Val(f.b.const(value, DType.bool), "bool", const=value)


def _to_bool(f: Frame, v: Val, e: Expr) -> Val:
    if v.kind == "bool":
        return v
    raise f.error(BadTypeError, f"{describe(e)} is {show(v)}, not a truth value", e.pos)


def _power(f: Frame, x: Val, k: int) -> Val:
    if isinstance(x.const, (int, float)) and not isinstance(x.const, bool):
        return const(f, x.const ** k)
    out = x
    for _ in range(k - 1):  # small integer powers as products: exact, and what fusions look for
        out = elementwise(f.b, Op.MUL, [out, x], "multiply")
    return out


# ---------------------------------------------------------------------- names
def lookup(f: Frame, text: str, pos: Any) -> Any:
    if text in f.maps:
        return index_var_val(f, text, pos)
    if text in f.loops:
        return const(f, f.loops[text])
    name = parse_name(text)
    active = f.active()
    key = name.key(active)
    loop_idx = {s: f.loops[s] for _, s in name.scripts if s in f.loops}
    map_idx = [s for _, s in name.scripts if s in f.maps]
    if key in f.vars:
        v = f.vars[key]
        if isinstance(v, Family):
            member = tuple(loop_idx.values())
            if member not in v.members:
                raise f.error(UnknownNameError, f"{text} has not been assigned for {_fmt_idx(loop_idx)}", pos)
            return v.members[member]
        if map_idx and isinstance(v, tuple):  # a vectorised family: (Val, its variables)
            val, own = v
            return _rename(val, dict(zip(own, (f.maps[s].internal for s in map_idx), strict=True)), f, map_idx)
        return v
    if key in f.hyper_keys():
        return f.hyper_value(key, pos)
    p = f.param(name, loop_idx, pos)
    if p is not None:
        return p
    ascii_key = name.ascii()
    real = _real_hyper(f, ascii_key)
    if real is not None:
        return const(f, real)
    s = f.size_of_name(text, pos, create=False)
    if s is not None:
        return SizeVal(s)
    if name.base in ("π", "pi") and not name.scripts:
        return const(f, math.pi)
    if name.base == "e" and not name.scripts and not name.primes:
        return const(f, math.e)
    # Y¹, e_1, e_ℓ: a script that is a number or a size picks a member of a family.
    for i, (_kind, script) in enumerate(name.scripts):
        fam_key = _key_with_placeholder(name, i)
        if fam_key in f.vars:
            return _member(f, f.vars[fam_key], script, text, pos)
    # x³: a power of a value
    if name.sups and all(s.isdigit() for s in name.sups) and not name.subs:
        base = name.without_script(name.sups[-1])
        inner = lookup(f, str(base), pos)
        if isinstance(inner, Val):
            return _power(f, inner, int(name.sups[-1]))
    raise f.unknown_name(text, pos)


def _real_hyper(f: Frame, key: str) -> float | None:
    g: Frame | None = f
    while g is not None:
        if key in g.reals:
            return g.reals[key]
        g = g.caller
    # A callee's real hyperparameter (ε of layer_norm) that no caller declares: the config's value.
    declared = any(d.type is not None and d.type.kind == "real" and parse_name(d.name).ascii() == key
                   for d in f.alg.hyper)
    root = f.root()
    if declared and root.config is not None and key in root.config:
        v = root.config[key]
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            root.config_used.add(key)
            return float(v)
    return None


def _fmt_idx(idx: dict[str, int]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in idx.items()) or "these indices"


def _key_with_placeholder(name: Any, i: int) -> str:
    scripts = list(name.scripts)
    kind, _ = scripts[i]
    sups = [("•" if j == i else s) for j, (k, s) in enumerate(scripts) if k == "^"]
    subs = [("•" if j == i else s) for j, (k, s) in enumerate(scripts) if k == "_"]
    return f"{name.base}{chr(39) * name.primes}^{','.join(sups)}_{','.join(subs)}"


def _member(f: Frame, fam: Any, script: str, text: str, pos: Any) -> Any:
    if isinstance(fam, Family):
        idx = _script_int(f, script, pos)
        if (idx,) not in fam.members:
            raise f.error(UnknownNameError, f"{text} has not been assigned", pos)
        return fam.members[(idx,)]
    raise f.error(BadTypeError, f"{text}: a single member of a vectorised family cannot be taken; "
                  "use the whole family in a column list", pos)


def _script_int(f: Frame, script: str, pos: Any) -> int:
    if script.isdigit():
        return int(script)
    s = f.size_of_name(script, pos, create=False)
    if s is not None and f.b.resolve(s).is_int:
        return f.b.resolve(s).value
    raise f.error(BadTypeError, f"cannot use {script} as an index here", pos)


def _rename(v: Val, mapping: dict[str, str], f: Frame, map_idx: list[str]) -> Val:
    free = []
    for name, size in v.free:
        new = mapping.get(name, name)
        mv = next((m for m in f.maps.values() if m.internal == new), None)
        if mv is not None:
            if mv.size is None:
                mv.size = size
            else:
                unify(f.b, mv.size, size, f"index {new.split('#')[0]}")
        free.append((new, size))
    return replace(v, free=tuple(free))


# ---------------------------------------------------------------------- indexing
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
            k = int(idx.const)
            if k != idx.const or k < 1:
                raise f.error(BadTypeError, f"index {idx.const} is not a position (they count from 1)", it.pos)
            idx = Val(f.b.const(k - 1, DType.int64), "index")
        if not isinstance(idx, Val) or idx.kind not in ("token", "index") or idx.dims:
            raise f.error(BadTypeError, f"{describe(it)} is {_shown(idx)}, not an index (a position or a token id)",
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


def as_size(v: Any) -> Size | None:
    """A count: a size, or a whole number written out (`for l = 1, 2, …, 3 do`, `Σ_{i=1}^{2}`); else None."""
    if isinstance(v, SizeVal):
        return v.size
    c = v.const if isinstance(v, Val) and not v.dims and not v.free else None
    if isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and c == int(c) and c >= 0:
        return Size.of(int(c))
    return None


# ---------------------------------------------------------------------- sums and lists
def _sum(f: Frame, e: Expr) -> Val:
    var, lo, hi, body = e.args
    size: Size | None = None
    if hi is not None:
        lo_v = ev(f, lo)
        if not (isinstance(lo_v, Val) and lo_v.const == 1):
            raise f.error(ShapeError, "a sum starts at 1 (partial sums are not supported)", lo.pos)
        size = as_size(ev(f, hi))
        if size is None:
            raise f.error(BadTypeError, "a sum's upper bound must be a size", hi.pos)
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


def _family_of(f: Frame, items: tuple, e: Expr) -> tuple[Any, list[str]]:
    """[e_1, e_2, …, e_ℓ] → the family e and the scripts that index it."""
    names = [it for it in items if it.op == "name"]
    if len(names) != len(items) - 1 or len(names) < 2 or items[-2].op != "ellipsis":
        raise f.error(BadTypeError, "write a family as [e_1, e_2, …, e_n]", e.pos)
    parsed = [parse_name(n.text) for n in names]
    first = parsed[0]
    for i, _ in enumerate(first.scripts):
        key = _key_with_placeholder(first, i)
        if all(len(p.scripts) == len(first.scripts) and _key_with_placeholder(p, i) == key for p in parsed):
            if key in f.vars:
                return f.vars[key], [p.scripts[i][1] for p in parsed]
            raise f.error(UnknownNameError, f"no family {names[0].text.split('_')[0]} has been assigned", e.pos)
    raise f.error(BadTypeError, "the items of a list with … must differ in one index", e.pos)


def _column_list(f: Frame, e: Expr) -> Val:
    items = e.args
    if not any(it.op == "ellipsis" for it in items):
        cols = [ev_val(f, it) for it in items]
        for it, c in zip(items, cols, strict=True):
            _check_column(f, c, it)
        return _stack(f, [replace(c, node=f.b.node(Op.UNSQUEEZE, c.node, axes=[c.paper_axis0 + 1]),
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
    count = _script_int(f, last, e.pos)
    missing = [k for k in range(1, count + 1) if (k,) not in fam.members]
    if missing:
        raise f.error(UnknownNameError, f"members {missing} of the list have not been assigned", e.pos)
    cols = [fam.members[(k,)] for k in range(1, count + 1)]
    for c in cols:
        _check_column(f, c, e)
    return _stack(f, [replace(c, node=f.b.node(Op.UNSQUEEZE, c.node, axes=[c.paper_axis0 + 1]),
                              dims=c.dims + (ONE,)) for c in cols], axis=1, e=e)


def _shown(v: Any) -> str:
    return show(v) if isinstance(v, Val) else "not a value"


def _check_column(f: Frame, c: Any, it: Expr) -> None:
    if not isinstance(c, Val) or len(c.dims) != 1:
        raise f.error(ShapeError, f"a list [a, b, …] puts vectors side by side as columns; {describe(it)} is "
                      f"{_shown(c)}", it.pos)


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
            raise f.error(ShapeError, f"only vectors and matrices can be stacked, not {_shown(m)}", e.pos)
        dims = (m.dims[0] * f.b.resolve(s),) + m.dims[1:]
        shape = list(m.node.type.shape)
        shape[m.paper_axis0] = dims[0].dim()
        node = f.b.node(Op.CONCAT, m.node, axis=m.paper_axis0, type=TensorType(m.node.dtype, tuple(shape)))
        return replace(m, node=node, dims=dims)
    count = _script_int(f, last, e.pos)
    missing = [k for k in range(1, count + 1) if (k,) not in fam.members]
    if missing:
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
    target = [("b", None)] * batched + [("d", i) for i in range(rank)] + [("f", n) for n, _ in vals[0].free]
    nodes = [to_layout(f.b, v, target) for v in vals]
    if batched and not all(v.batched for v in vals):
        raise f.error(ShapeError, "cannot stack per-example values with parameters", e.pos)
    total = vals[0].dims[axis]
    for v in vals[1:]:
        total = total + v.dims[axis]
    dims = vals[0].dims[:axis] + (total,) + vals[0].dims[axis + 1:]
    concat_axis = (1 if batched else 0) + axis
    explicit = None
    if total.unknowns:
        # Sizes not yet inferred: name the stacked size as the Size algebra does (2·?d_mid, not
        # ?d_mid+?d_mid), so a parameter declared with H·d_mid meets the same dim.
        shape = list(nodes[0].type.shape)
        shape[concat_axis] = total.dim()
        explicit = TensorType(nodes[0].dtype, tuple(shape))
    node = f.b.node(Op.CONCAT, *nodes, axis=concat_axis, type=explicit)
    return Val(node, vals[0].kind, dims, vals[0].free, batched)


# ---------------------------------------------------------------------- comparisons and masks
def _compare(f: Frame, e: Expr) -> Val:
    operands, rels = e.args
    # [[t ≤ t']] over two index variables is a mask op, the form fusion passes look for
    if len(rels) == 1 and all(o.op == "name" and o.text in f.maps for o in operands) \
            and operands[0].text != operands[1].text:  # [[t ≤ t]] is no mask over two indices
        a, b = (f.maps[o.text] for o in operands)
        if a.size is not None and b.size is not None:
            node = f.b.node(Op.INDEX_MASK, size_node(f, a.size, e.pos), size_node(f, b.size, e.pos), rel=rels[0],
                            dims=[f.b.resolve(a.size).dim(), f.b.resolve(b.size).dim()])
            return Val(node, "bool", (), ((a.internal, a.size), (b.internal, b.size)))
    vals = [ev_val(f, o) for o in operands]
    out: Val | None = None
    for (x, y), rel in zip(zip(vals, vals[1:], strict=False), rels, strict=True):
        if x.kind != y.kind:
            x, y = cast_real(f.b, x), cast_real(f.b, y)
        c = elementwise(f.b, REL_OPS[rel], [x, y], "compare", kind="bool")
        out = c if out is None else elementwise(f.b, Op.AND, [out, c], "and", kind="bool")
    assert out is not None
    return out


def index_var_val(f: Frame, name: str, pos: Any) -> Val:
    mv = f.maps[name]
    if mv.size is None:
        raise f.error(BadTypeError, f"the range of {name} is not known here", pos)
    node = f.b.node(Op.ARANGE, size_node(f, mv.size, pos), dim=f.b.resolve(mv.size).dim())
    return Val(node, "index", (), ((mv.internal, mv.size),))


# ---------------------------------------------------------------------- calls
def call_expr(f: Frame, e: Expr) -> Any:
    name = e.text
    args, binds = e.args
    if f.prog.lookup(f.alg.module, name):
        from pseudoformer.frontend.calls import call_algorithm  # calls imports this module

        return call_algorithm(f, e)
    if name not in BUILTINS:
        raise f.error(UnknownNameError, f"unknown algorithm {name}", e.pos,
                      (f"builtins: {', '.join(sorted(BUILTINS))}",))
    if binds or len(args) != 1:
        raise f.error(AlgError, f"{name} takes one argument", e.pos)
    if name == "length":
        v = ev(f, args[0])
        if not isinstance(v, Val) or len(v.dims) != 1:
            raise f.error(BadTypeError, f"length() needs a sequence; {describe(args[0])} is {_shown(v)}", args[0].pos)
        return SizeVal(v.dims[0])
    if name == "sqrt":  # the ASCII spelling of √, which folds constants: same IR as √d_attn
        return _ev(f, Expr("sqrt", (args[0],), e.pos))
    x = ev_val(f, args[0])
    if name == "softmax":
        return softmax_columns(f.b, cast_real(f.b, x))
    op = UNARY_BUILTINS[name]
    attrs = {"approximate": "none"} if op is Op.GELU else {}
    return unary(f.b, op, x, **attrs)
