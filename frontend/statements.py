"""Statements: run an algorithm's body, unroll `for … do` loops (within the node limit), vectorise column
maps, and assign values whole or entry-wise."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lark import Tree

from pseudoformer.base.errors import AlgError
from pseudoformer.frontend.ast import Expr, Stmt
from pseudoformer.frontend.draws import draw_value
from pseudoformer.frontend.errors import BadTypeError, LimitError, ShapeError
from pseudoformer.frontend.expressions.affine import Run, run_of, size_expr
from pseudoformer.frontend.expressions.core import index_var_val
from pseudoformer.frontend.expressions.forms import (
    as_size,
    describe,
    distinct_index_vars,
    ev,
    ev_val,
    static_int,
)
from pseudoformer.frontend.frame import Frame, MapVar
from pseudoformer.frontend.names import parse_name
from pseudoformer.frontend.params import collection
from pseudoformer.frontend.pieces import Piece, Pieces, add_piece, assemble, whole
from pseudoformer.frontend.scatter import scatter_into
from pseudoformer.frontend.sizes import Size
from pseudoformer.frontend.tensor_ops import (
    ShapeMismatch,
    cast_real,
    dim_to_free,
    elementwise,
    show,
    show_size,
    to_layout,
    unify,
)
from pseudoformer.frontend.values import Family, NodeLimit, Val
from pseudoformer.ir import DType, Op, Span
from pseudoformer.ir.ops import IRTypeError


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


def run_body(f: Frame) -> Any:
    try:
        exec_block(f, f.alg.body)
    except _Return as r:
        return r.value
    raise f.error(BadTypeError, f"{f.alg.name} ends without `return`", f.alg.pos)


def exec_block(f: Frame, stmts: list[Stmt]) -> None:
    for s in stmts:
        exec_stmt(f, s)


def exec_stmt(f: Frame, s: Stmt) -> None:
    f.b.span = Span(s.pos.file, s.pos.line, s.pos.col)
    f.b.scope = f.scope
    try:
        _exec(f, s)
    except ShapeMismatch as m:
        raise f.shape_error(m, s.pos) from None
    except NodeLimit:
        raise f.error(LimitError, f"the graph grows past {f.b.max_nodes:,} IR nodes here{_sizes(f)}; "
                      "--max-nodes N raises the limit", s.pos) from None
    except IRTypeError as m:  # as in ev, for what a statement builds itself (an assignment's where)
        raise f.error(ShapeError, f"the values of this line do not fit ({m})", s.pos) from None


def _sizes(f: Frame) -> str:
    config = f.root().config or {}
    shown = ", ".join(f"{k} = {v}" for k, v in config.items() if isinstance(v, int) and not isinstance(v, bool))
    return f" (with {shown})" if shown else ""


def _unroll(f: Frame, s: Stmt, count: int) -> None:
    """Unroll a block loop, refusing it after one iteration when all of them would pass the node limit."""
    saved_scope = f.scope
    start = f.b.nodes
    for i in range(1, count + 1):
        f.loops[s.name] = i
        f.scope = f"{saved_scope}/{collection(s.name)}.{i - 1}"
        exec_block(f, s.body)
        projected = f.b.nodes + (f.b.nodes - start) * (count - i)
        if i == 1 and projected > f.b.max_nodes:
            bound = describe(s.bounds[-1])
            times = f"{bound} = {count:,}" if bound != str(count) else f"{count:,}"
            raise f.error(LimitError, f"this loop runs {times} times: unrolled, the graph would have about "
                          f"{projected:,} IR nodes, more than the limit of {f.b.max_nodes:,}; --max-nodes N raises "
                          "it", s.pos)
    f.loops.pop(s.name, None)
    f.scope = saved_scope


def _exec(f: Frame, s: Stmt) -> None:
    k = s.kind
    if k == "assign" and isinstance(s.target, Tree) and s.target.data == "fn_target":
        fn, arg = s.target.children
        raise f.error(BadTypeError, f"{fn}({arg}) ← … defines {fn} as a function of the parameters {arg}, which only "
                      "a training algorithm (Algorithms 11–13, with θ ← θ − η · ∇loss(θ)) may do; a model assigns "
                      f"values: {fn} ← …", s.pos)
    if k == "assign":
        _ranges_from_target(f, s)  # ∀t_z, t_x : S[t_z, t_x] ← b(t_z, t_x) − S[t_z, t_x]: the ranges are S's
        value = ev(f, s.value)
        assign(f, s.target, value, None, s)
        _check_remark(f, s, value)
    elif k == "return":
        v = ev(f, s.value)
        _check_remark(f, s, v)
        raise _Return(v)
    elif k == "for_map":
        n = static_int(f, s.bounds[0])
        if n is None:
            n = size_expr(f, s.bounds[0])
        if n is None:
            n = as_size(ev(f, s.bounds[0]))
        if n is None:
            raise f.error(BadTypeError, "a column map runs over [n] for a size n", s.bounds[0].pos)
        with _mapvars(f, [(s.name, n)]):
            exec_block(f, s.body)
    elif k in ("for_in", "for_range"):
        if k == "for_range":
            first, second = (ev(f, x) for x in s.bounds[:2])
            if not (isinstance(first, Val) and first.const == 1 and isinstance(second, Val) and second.const == 2):
                raise f.error(BadTypeError, "write loops as for l = 1, 2, …, L do", s.pos)
        bound = static_int(f, s.bounds[-1])
        if bound is None:
            raise f.error(BadTypeError, "a loop's bound must be a size", s.pos)
        size = f.b.resolve(bound)
        if not size.is_int and not f.root().symbolic:
            raise f.error(BadTypeError, f"a block loop is unrolled, so it needs a count known before run time, and "
                          f"{show_size(size)} is only known when the model runs; map over positions on one line instead: "
                          f"for {s.name} ∈ [n] : …", s.pos)
        _unroll(f, s, size.value if size.is_int else 1)  # checking without a config: one iteration stands for all
    elif k == "forall":
        with _mapvars(f, [(v, None) for v in s.vars]):
            exec_block(f, s.body)
    elif k == "if":
        _ranges_from_target(f, s.body[0])
        cond = ev_val(f, s.value)
        if cond.kind != "bool":
            raise f.error(BadTypeError, f"the condition is {show(cond)}, not a truth value", s.value.pos)
        if cond.const is False:
            return
        if cond.const is True:
            exec_block(f, s.body)
            return
        inner = s.body[0]
        if inner.kind != "assign":
            raise f.error(BadTypeError, "`if … then` takes an assignment", inner.pos)
        assign(f, inner.target, ev(f, inner.value), cond, inner)
    elif k in ("while", "sample"):  # only in inference algorithms, which are never elaborated
        raise f.error(BadTypeError, f"`{k}` belongs to inference algorithms (Algorithms 14 and 15), which "
                      "sample tokens; a model's body is one graph and cannot have it", s.pos)
    elif k == "random":  # a model's draw: its expectation, or an input the trainer fills (frontend/draws.py)
        assign(f, s.target, draw_value(f, s), None, s)
    else:
        raise f.error(BadTypeError, f"unexpected {k}", s.pos)


def _ranges_from_target(f: Frame, inner: Stmt) -> None:
    """In `∀t, t′ : if t < t′ then S[t, t′] ← −∞` the ranges of t and t′ are S's dims: read them off S
    before the condition needs them (indexing an existing value binds a free variable's range)."""
    if inner.kind != "assign" or len(inner.target.children) < 2:
        return
    items = inner.target.children[1]
    if not any(it.op == "name" and it.text in f.maps and f.maps[it.text].size is None for it in items):
        return
    distinct_index_vars(f, items)
    tok = inner.target.children[0]
    try:
        ev(f, Expr("index", (Expr("name", (), tok.pos, str(tok)), tuple(items)), inner.pos))
    except AlgError:
        pass  # not assigned yet, or not indexable: assign() reports it in its own words


def _check_remark(f: Frame, s: Stmt, value: Any) -> None:
    """[[Query ∈ ℝ^{d_attn × ℓ_x}]] after a line is a claim about its value's shape: hold the source to it."""
    if s.remark is not None and isinstance(value, Val):
        name, typ, rpos = s.remark
        f.bind_dims(typ, value.dims, f"the remark [[{name} ∈ …]]", rpos)


class _mapvars:
    def __init__(self, f: Frame, vars_: list[tuple[str, Any]]) -> None:
        self.f, self.vars = f, vars_
        self.saved: dict[str, Any] = {}

    def __enter__(self) -> None:
        for name, size in self.vars:
            self.saved[name] = self.f.maps.get(name)
            self.f.maps[name] = MapVar(self.f.b.fresh(name), size)

    def __exit__(self, *exc: object) -> None:
        for name, old in self.saved.items():
            if old is None:
                self.f.maps.pop(name, None)
            else:
                self.f.maps[name] = old


def assign(f: Frame, target: Any, value: Any, cond: Val | None, s: Stmt) -> None:
    tok = target.children[0]
    items = target.children[1] if len(target.children) > 1 else None
    name = parse_name(str(tok))
    key = name.key(f.active())
    loop_idx = tuple(f.loops[x] for _, x in name.scripts if x in f.loops)
    map_vars = [x for _, x in name.scripts if x in f.maps]
    if items is None:
        if cond is not None:
            raise f.error(BadTypeError, "a conditional assignment needs indices: S[t_z, t_x] ← …", s.pos)
        if map_vars:
            if not isinstance(value, Val):
                raise f.error(BadTypeError, "only values can be assigned in a map", s.pos)
            internals = tuple(f.maps[x].internal for x in map_vars)
            missing = [x for x, i in zip(map_vars, internals, strict=True) if i not in value.free_vars]
            if missing:
                raise f.error(BadTypeError, f"the value does not depend on {', '.join(missing)}", s.pos)
            f.vars[key] = (value, internals)
        elif loop_idx:
            fam = f.vars.get(key)
            if not isinstance(fam, Family):
                fam = f.vars[key] = Family()
            fam.members[loop_idx] = value
        else:
            if isinstance(value, Val) and value.free and set(value.free_vars) & {m.internal for m in f.maps.values()}:
                raise f.error(BadTypeError, f"{tok} is assigned a value that depends on a loop index; "
                              f"index it: {tok}[:, t] ← …", s.pos)
            f.vars[key] = value
        return
    if not isinstance(value, Val):
        raise f.error(BadTypeError, "only values can be assigned entry-wise", s.pos)
    computed = [k for k, it in enumerate(items) if _computed(f, it, cond)]
    targets = _targets(f, items, cond, s) if not computed else []
    distinct_index_vars(f, items)
    # Sʰ[t, t'] ← … inside `For h ∈ [H]:` updates this head's member of the family Sʰ.
    fam = f.vars.get(key) if loop_idx else None
    if loop_idx and not isinstance(fam, Family):
        fam = Family()
    existing = fam.members.get(loop_idx) if fam is not None else f.vars.get(key)
    if isinstance(existing, Pieces) and (cond is not None or len(existing.extents) != len(items)):
        existing = assemble(f, existing, s.pos)
    if existing is not None and isinstance(existing, Val) and len(existing.dims) != len(items):
        raise f.error(ShapeError, f"{tok} is {show(existing)}; it takes {len(existing.dims)} indices", s.pos)
    if computed:
        if len(computed) > 1 or cond is not None:
            raise f.error(BadTypeError, "an assignment at computed positions has one computed index and no "
                          "condition", items[computed[-1]].pos)
        if isinstance(existing, Pieces):
            existing = assemble(f, existing, s.pos)
        stored = scatter_into(f, str(tok), existing, items, computed[0], value, s, _place)
    elif cond is not None:
        if existing is None:
            raise f.error(BadTypeError, f"{tok} is not defined yet", s.pos)
        if not isinstance(existing, Val):
            raise f.error(BadTypeError, f"{tok} is not a vector or a matrix, so it cannot be updated entry-wise",
                          s.pos)
        view = existing
        for i in reversed(range(len(items))):
            if items[i].op == "name":
                mv = f.maps[items[i].text]
                if mv.size is None:
                    mv.size = view.dims[i]
                view = dim_to_free(f.b, view, i, mv.internal)
        if value.node.dtype is not view.node.dtype and view.kind == "real":
            value = cast_real(f.b, value)  # S[t, t'] ← [[…]]: a truth value assigned as the number 0 or 1
        new = elementwise(f.b, Op.WHERE, [cond, value, view], "assign", kind=view.kind)
        value = new
    if not computed:
        result = _place(f, value, targets, s)
        stored = _entries(f, str(tok), key, result, targets, existing, tok.pos)
    if fam is not None:
        fam.members[loop_idx] = stored
        f.vars[key] = fam
    else:
        f.vars[key] = stored


def _computed(f: Frame, it: Expr, cond: Val | None) -> bool:
    """A target index that is neither `:`, a map variable nor a run `a·i + b` of one."""
    if it.op == "all" or it.op == "name" and it.text in f.maps:
        return False
    return cond is not None or run_of(f, it) is None


def _targets(f: Frame, items: list, cond: Val | None, s: Stmt) -> list[tuple[str, Run | None]]:
    """A target's indices: ("", None) for `:`, (i, None) for a map variable, (i, run) for `a·i + b`."""
    out: list[tuple[str, Run | None]] = []
    for it in items:
        if it.op == "all":
            out.append(("", None))
        elif it.op == "name" and it.text in f.maps:
            out.append((it.text, None))
        else:
            run = run_of(f, it)
            assert run is not None and cond is None  # the others are computed positions (scatter.py)
            out.append((run.var, run))
    return out


def _entries(f: Frame, name: str, key: str, result: Val, targets: list, existing: Any, target_pos: Any) -> Any:
    """What an entry-wise assignment leaves: the whole new value, or the pieces assigned so far."""
    if isinstance(existing, Val):
        extents: tuple[Size | None, ...] = tuple(f.b.resolve(d) for d in existing.dims)
    elif isinstance(existing, Pieces):
        extents = existing.extents
    else:
        extents = _declared_extents(f, key, len(targets))
    runs = []
    for (var, run), dim, extent in zip(targets, result.dims, extents, strict=True):
        if run is None:
            run = whole(f.b.resolve(dim))
            if var and extent is not None and f.b.resolve(dim) != extent:  # Y[i, t] with i ∈ [d/2] of d rows
                run = Run(var, Size.of(0), 1, f.b.resolve(dim))
        runs.append(run)
    partial = any(r.start != Size.of(0) or r.stride != 1 or e is None or r.count != e
                  for r, e in zip(runs, extents, strict=True))
    if isinstance(existing, Pieces):
        partial = True
    if not partial or (existing is None and all(e is None for e in extents) and all(t[1] is None for t in targets)
                       and not any(t[0] for t in targets)):
        if isinstance(existing, Val):
            for old, new in zip(existing.dims, result.dims, strict=True):
                unify(f.b, old, new, f"assigning to {name}")
        return result
    pieces = existing if isinstance(existing, Pieces) else Pieces(name, extents, existing)
    add_piece(f, pieces, Piece(tuple(runs), result, target_pos))
    return pieces


def _spread(f: Frame, value: Val, var: str, s: Stmt) -> Val:
    """`for i ∈ [d], t ∈ [ℓ] : M[i, t] ← [[t ≤ 3]]`: a value that does not depend on i is the same in
    every row, broadcast over i's range."""
    if f.maps[var].size is None:
        raise f.error(BadTypeError, f"the value does not depend on {var}, so its range is unknown", s.pos)
    positions = index_var_val(f, var, s.pos)
    if value.kind == "bool":
        every = elementwise(f.b, Op.GE, [positions, Val(f.b.const(0, DType.int64), "index")], "compare")
        return elementwise(f.b, Op.AND, [value, every], "and", kind="bool")
    if value.kind == "index":  # t itself, as a position
        zeros = elementwise(f.b, Op.MUL, [positions, Val(f.b.const(0, DType.int64), "index")], "multiply")
        return elementwise(f.b, Op.ADD, [value, zeros], "add", kind="index")
    value = cast_real(f.b, value)
    zeros = elementwise(f.b, Op.MUL, [cast_real(f.b, positions), Val(f.b.const(0.0), "real")], "multiply")
    return elementwise(f.b, Op.ADD, [value, zeros], "add")


def _declared_extents(f: Frame, key: str, rank: int) -> tuple[Size | None, ...]:
    """An output's declared sizes (Y ∈ ℝ^{d × ℓ}): the extent its pieces must fill."""
    for d in f.alg.output_decls:
        if d.type is not None and parse_name(d.name).key() == key and len(d.type.dims) == rank:
            return tuple(f.b.resolve(f.eval_size(x)) for x in d.type.dims)
    return (None,) * rank


def _place(f: Frame, value: Val, targets: list[tuple[str, Run | None]], s: Stmt) -> Val:
    """Build the whole matrix from a value computed per index: X̃[:, t] ← v(t)."""
    own_dims = iter(range(len(value.dims)))
    target_labels: list = []
    dims = []
    used = set()
    for var, _run in targets:
        if not var:
            i = next(own_dims, None)
            if i is None:
                raise f.error(ShapeError, "more `:` than the value has dims", s.pos)
            target_labels.append(("d", i))
            dims.append(value.dims[i])
        else:
            internal = f.maps[var].internal
            if internal not in value.free_vars:
                value = _spread(f, value, var, s)
            target_labels.append(("f", internal))
            dims.append(value.free_size(internal))
            used.add(internal)
    if next(own_dims, None) is not None:
        raise f.error(ShapeError, f"the value is {show(value)}: it has more dims than `:` in the target", s.pos)
    rest = [(n, sz) for n, sz in value.free if n not in used]
    labels_ = [("b", None)] * value.batched + target_labels + [("f", n) for n, _ in rest]
    node = to_layout(f.b, value, labels_)
    return replace(value, node=node, dims=tuple(dims), free=tuple(rest), const=None)
