"""Calls: inline a callee's body (statements.py runs it), binding its inputs, parameters and hyperparameters."""

from __future__ import annotations

import math
from typing import Any

from pseudoformer.base.limits import MAX_CALL_DEPTH
from pseudoformer.frontend.ast import Algorithm, Decl, Expr, is_inference
from pseudoformer.frontend.errors import (
    ArityError,
    BadTypeError,
    HyperparameterError,
    LimitError,
    ShapeError,
    UnknownNameError,
)
from pseudoformer.frontend.expressions.forms import (
    call_builtin,
    describe,
    ev,
    handles,
    size_val,
)
from pseudoformer.frontend.expressions.lookup import real_hyper
from pseudoformer.frontend.frame import Frame
from pseudoformer.frontend.names import parse_name
from pseudoformer.frontend.params import GroupVal, top_entries
from pseudoformer.frontend.statements import run_body
from pseudoformer.frontend.tensor_ops import (
    cast_real,
    dim_to_free,
    free_to_dim,
    show,
)
from pseudoformer.frontend.values import MaskDef, SizeVal, Val
from pseudoformer.ir import Span


def input_decl(alg: Algorithm, arg: str) -> Decl | None:
    """The Input declaration of a signature argument; `e_{1:T}` in the signature is the family `e_t`."""
    want = parse_name(arg)
    for d in alg.inputs:
        if d.name == arg:
            return d
        if d.var is not None and parse_name(d.name).base == want.base:
            return d
    return None


def _pick(f: Frame, e: Expr, cands: list[Algorithm], n_args: int, n_pos: int) -> Algorithm:
    fits = [a for a in cands if len(a.data_args) >= n_args and len(a.param_args) >= n_pos]
    exact = [a for a in fits if len(a.data_args) == n_args]
    pool = exact or fits
    if not pool:
        sig = "; ".join(f"{a.name}({', '.join(a.data_args)} | {', '.join(a.param_args)})" for a in cands)
        raise f.error(ArityError, f"{e.text} takes {'/'.join(str(len(a.data_args)) for a in cands)} data argument(s) "
                      f"and {'/'.join(str(len(a.param_args)) for a in cands)} after `|`; this call gives {n_args} and "
                      f"{n_pos}", e.pos, (f"declared: {sig}",))
    return pool[-1]


@handles("call")
def call_expr(f: Frame, e: Expr) -> Any:
    """`name(…)`: an algorithm in scope is inlined; otherwise a builtin."""
    if f.prog.lookup(f.alg.module, e.text):
        return call_algorithm(f, e)
    return call_builtin(f, e)


def call_algorithm(f: Frame, e: Expr) -> Any:
    args, binds = e.args
    positional = [bd for bd in binds if bd.args[1] is None]
    keyword = [bd for bd in binds if bd.args[1] is not None]
    callee = _pick(f, e, f.prog.lookup(f.alg.module, e.text), len(args), len(positional))
    if is_inference(callee):  # its loop grows the sequence: there is no graph to inline
        raise f.error(BadTypeError, f"{callee.name} is an inference algorithm (it samples tokens in a loop), so a "
                      "model cannot call it; `pseudoformer generate` runs it", e.pos)
    caller: Frame | None = f
    depth = 0
    while caller is not None:  # inlining a recursive call would never end
        if caller.alg is callee:
            raise f.error(BadTypeError, f"{callee.name} calls itself, and algorithms are inlined, so they cannot "
                          "be recursive", e.pos)
        caller, depth = caller.caller, depth + 1
    if depth >= MAX_CALL_DEPTH:
        raise f.error(LimitError, f"this call of {callee.name} nests algorithm calls more than {MAX_CALL_DEPTH} "
                      "deep; calls are inlined, so write the chain with fewer levels", e.pos)
    if not args:
        raise f.error(ArityError, f"{callee.name} needs at least one data argument", e.pos)
    vals = [ev(f, a) for a in args]
    # The paper's shorthand: MHAttention(X | …) is self-attention, Z = X.
    vals += [vals[0]] * (len(callee.data_args) - len(vals))
    g = Frame(alg=callee, prog=f.prog, b=f.b, weights=f.weights, caller=f, scope=f"{f.scope}/{callee.name}")
    mapped: list[str] = []
    for name, v, a in zip(callee.data_args, vals, list(args) + [args[0]] * len(callee.data_args), strict=False):
        mapped += _bind_input(g, name, v, a)
    top = top_entries(callee.params)
    hyper_names = {d.name for d in callee.hyper}
    # A keyword argument takes its own slot, so the positional ones fill the slots left, in order:
    # `F(X | W, Mask ≡ 1, b, κ)` for `F(X | W, Mask, b, κ)` binds b and κ, not Mask and b.
    named = {_keyword_target(bd).text for bd in keyword}
    slots = [p for p in callee.param_args if p not in named]
    if len(positional) > len(slots):
        extra = positional[len(slots)].args[0]
        raise f.error(ArityError, f"{callee.name} takes {len(callee.param_args)} argument(s) after `|` "
                      f"({', '.join(callee.param_args)}); this call gives {len(positional)} by position and "
                      f"names {len(named & set(callee.param_args))}, so this one has no place", extra.pos)
    for pname, bd in zip(slots, positional, strict=False):
        _bind_param(f, g, pname, bd.args[0], top, hyper_names)
    for bd in keyword:
        lhs, _, rhs = bd.args
        target = _keyword_target(bd)
        if target.op != "name" or target.text not in hyper_names:
            raise f.error(HyperparameterError, f"{callee.name} has no hyperparameter {describe(target)}",
                          lhs.pos)
        if (real := real_decl(callee, target.text)) is not None:
            if lhs.op == "index":
                raise f.error(BadTypeError, f"{target.text} is a real number of {callee.name}; pass it as "
                              f"{target.text} = …, without indices", lhs.pos)
            g.hyper[target.text] = real_argument(f, callee, real, rhs)
            continue
        vars_ = tuple(i.text for i in lhs.args[1]) if lhs.op == "index" else ()
        if any(not i.op == "name" for i in (lhs.args[1] if lhs.op == "index" else ())):
            raise f.error(BadTypeError, "define a mask entry-wise with index variables: Mask[t, t'] = …", lhs.pos)
        g.hyper[target.text] = MaskDef(vars_, rhs, f)
    for d in callee.hyper:
        if d.type is not None and d.type.kind == "bool" and d.name not in g.hyper:
            if d.name in f.hyper:
                g.hyper[d.name] = f.hyper[d.name]
            else:
                raise f.error(HyperparameterError, f"{callee.name} needs its hyperparameter {d.name}", e.pos)
    for d in callee.hyper:
        if real_decl(callee, d.name) is d and d.name not in g.hyper and real_hyper(g, parse_name(d.name).ascii()) is None:
            key = parse_name(d.name).ascii()
            raise f.error(HyperparameterError, f"{callee.name} needs its real hyperparameter {d.name}: pass it "
                          f"({d.name} = … after `|`), or set it in the config (-D {key}=…)", e.pos)
    for pname in callee.param_args:
        if pname in top and pname not in g.bound:
            raise f.error(ArityError, f"{callee.name} needs its parameter {pname} after `|`", e.pos)
    old = (f.b.span, f.b.scope)
    f.b.call_sites.setdefault(g.scope, Span(e.pos.file, e.pos.line, e.pos.col))
    result = run_body(g)
    f.b.span, f.b.scope = old
    if isinstance(result, Val):
        _check_output(g, result, e)
        for internal in mapped:
            result = free_to_dim(f.b, result, internal)
    return result


def _keyword_target(bd: Expr) -> Expr:
    """The name a keyword argument binds: `m` of `m = …`, `Mask` of `Mask[t, t'] ≡ …`."""
    lhs = bd.args[0]
    return lhs.args[0] if lhs.op == "index" else lhs


def _bind_input(g: Frame, name: str, v: Any, a: Expr) -> list[str]:
    decl = input_decl(g.alg, name)
    if decl is None:
        raise g.error(BadTypeError, f"{g.alg.name} declares no Input {name}", g.alg.pos)
    key = parse_name(decl.name).key(frozenset([decl.var]) if decl.var else frozenset())
    if isinstance(v, SizeVal):
        g.vars[key] = v
        return []
    if not isinstance(v, Val):
        raise g.error(BadTypeError, f"{describe(a)} is not a value", a.pos)
    t = decl.type
    if t.kind == "vocab" or t.kind == "index":
        want = 1 if t.star else 0
        if len(v.dims) != want or v.kind not in ("token", "index"):
            what = "token id" if t.kind == "vocab" else "position"
            raise g.caller.error(BadTypeError, f"{g.alg.name}'s {name} is a {'sequence of ' if t.star else ''}"
                                 f"{what}{'s' if t.star else ''}, not {show(v)}", a.pos)
        g.vars[key] = v
        return []
    rank = len(t.dims)
    if decl.var is not None:  # e_{1:T}: the caller passes the family as the columns of a matrix
        if len(v.dims) != rank + 1:
            raise g.caller.error(ShapeError, f"{g.alg.name}'s {name} is a family of {rank}-dim values, passed as "
                                 f"the columns of a matrix; {describe(a)} is {show(v)}", a.pos)
        if decl.range is not None and decl.range.kind == "index":
            g.bind_dims(decl.range, v.dims[-1:], f"the length of {name} in {g.alg.name}", a.pos)
        g.bind_dims(t, v.dims[:-1], f"argument {name} of {g.alg.name}", a.pos)
        internal = g.b.fresh(decl.var)
        g.vars[key] = (dim_to_free(g.b, v, rank, internal), (internal,))
        return []
    mapped: list[str] = []
    while len(v.dims) > rank:  # a vector algorithm applied to a matrix: map it over the columns
        internal = g.b.fresh("col")
        v = dim_to_free(g.b, v, len(v.dims) - 1, internal)
        mapped.insert(0, internal)
    if len(v.dims) < rank:
        raise g.caller.error(ShapeError, f"{g.alg.name}'s {name} is declared with {rank} dims; "
                             f"{describe(a)} is {show(v)}", a.pos)
    g.bind_dims(t, v.dims, f"argument {name} of {g.alg.name}", a.pos)
    g.vars[key] = v
    return mapped


def _bind_param(f: Frame, g: Frame, pname: str, expr: Expr, top: dict[str, Decl], hyper: set[str]) -> None:
    if pname in top:
        v = ev(f, expr)
        d = top[pname]
        if d.kind in ("group", "alg_group"):
            if not isinstance(v, GroupVal):
                raise f.error(BadTypeError, f"{g.alg.name}'s {pname} is a group of parameters; "
                              f"{describe(expr)} is not", expr.pos)
            if v.abstract and v.alg != g.alg.name:
                raise f.error(BadTypeError, f"{describe(expr)} holds the parameters of {v.alg}, not of {g.alg.name}",
                              expr.pos)
        elif isinstance(v, Val):
            g.bind_dims(d.type, v.dims, f"parameter {pname} of {g.alg.name}", expr.pos)
        else:
            raise f.error(BadTypeError, f"{g.alg.name}'s {pname} is a matrix or vector; {describe(expr)} is not", expr.pos)
        g.bound[pname] = v
    elif (real := real_decl(g.alg, pname)) is not None:
        g.hyper[pname] = real_argument(f, g.alg, real, expr)
    elif pname in hyper:
        if expr.op == "name" and expr.text in f.hyper:
            g.hyper[pname] = f.hyper[expr.text]
        else:
            g.hyper[pname] = MaskDef((), expr, f)
    else:
        raise f.error(BadTypeError, f"{pname} is neither a parameter nor a hyperparameter of {g.alg.name}", expr.pos)


def real_decl(alg: Algorithm, name: str) -> Decl | None:
    """The declaration of a real-valued hyperparameter (b ∈ ℝ, τ ∈ (0, ∞)) of `alg` named `name`."""
    for d in alg.hyper:
        if d.name == name and d.type is not None and d.type.kind == "real" and not d.type.dims:
            return d
    return None


def real_argument(f: Frame, callee: Algorithm, d: Decl, expr: Expr) -> Val:
    """A real passed in a call (`RoPE(X | b)`, `ALiBi(X | W, m = 2^{−8h/H})`): one number, evaluated in
    the caller; known before run time it stays a constant, so that it folds where it is used."""
    v = _named_real(f, callee, d, expr) if expr.op == "name" else ev(f, expr)
    if isinstance(v, SizeVal):
        v = size_val(f, v.size, expr.pos)
    if not isinstance(v, Val) or v.dims or v.free or v.kind not in ("real", "index") or isinstance(v.const, bool):
        shown_v = show(v) if isinstance(v, Val) else "not a value"
        raise f.error(BadTypeError, f"{callee.name}'s {d.name} is a real number; {describe(expr)} is {shown_v}",
                      expr.pos)
    lo, hi = d.type.interval or (-math.inf, math.inf)
    if isinstance(v.const, (int, float)) and not lo < v.const < hi:
        raise f.error(HyperparameterError, f"{callee.name}'s {d.name} is declared in ({lo:g}, "
                      f"{'∞' if hi == math.inf else f'{hi:g}'}), and this is {v.const:g}", expr.pos)
    return cast_real(f.b, v) if v.const is None else v


def _named_real(f: Frame, callee: Algorithm, d: Decl, expr: Expr) -> Any:
    """A bare name passed for a real (`PartialRoPE(X | b)`). The caller must know it: a name it does not declare
    would be found only in the config, where an integer reads as a size and 10000.0 as a wrong one; `check`
    (no config) and `compile` must say the same thing, with the two ways to write it."""
    key = parse_name(expr.text).ascii()
    frames = [f]
    while frames[-1].caller is not None:
        frames.append(frames[-1].caller)
    declared = any(key in g.sizes or any(parse_name(h.name).ascii() == key for h in g.alg.hyper) for g in frames)
    try:
        v = ev(f, expr)
    except (UnknownNameError, HyperparameterError):  # unknown, or the config's 10000.0 read as a size
        if declared:
            raise
        v = None
    if v is None or isinstance(v, SizeVal) and not declared:
        raise f.error(UnknownNameError, f"{expr.text} is not declared in {f.alg.name}: add `{d.name} ∈ ℝ` to its "
                      f"Hyperparameters (and set it in the config), or leave {expr.text} out of the call, since "
                      f"{callee.name} takes its {d.name} from its callers or the config (-D {key}=…)", expr.pos)
    return v


def _check_output(g: Frame, v: Val, e: Expr) -> None:
    for d in g.alg.output_decls:
        if d.type is not None and d.type.kind in ("real", "prob", "bool") and d.type.dims:
            g.bind_dims(d.type, v.dims, f"the output {d.name} of {g.alg.name}", g.alg.pos)
