"""Names: map and loop variables, assigned values and families, hyperparameters, parameters, sizes, constants."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any

from pseudoformer.base.errors import AlgError, Pos
from pseudoformer.frontend import pieces
from pseudoformer.frontend.ast import Expr
from pseudoformer.frontend.errors import BadTypeError, UnknownNameError
from pseudoformer.frontend.expressions.arith import real_power
from pseudoformer.frontend.expressions.core import const, handles, index_var_val, size_val
from pseudoformer.frontend.expressions.integers import static_int
from pseudoformer.frontend.frame import Frame
from pseudoformer.frontend.masks import evaluate_mask
from pseudoformer.frontend.names import Name, parse_name
from pseudoformer.frontend.parser import parse_script
from pseudoformer.frontend.tensor_ops import unify
from pseudoformer.frontend.values import Family, SizeVal, Val


@handles("name")
def _name(f: Frame, e: Any) -> Any:
    return lookup(f, e.text, e.pos)


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
            if isinstance(v.members[member], pieces.Pieces):
                v.members[member] = pieces.assemble(f, v.members[member], pos)
            return v.members[member]
        if isinstance(v, pieces.Pieces):
            v = f.vars[key] = pieces.assemble(f, v, pos)
        if map_idx and isinstance(v, tuple):  # a vectorised family: (Val, its variables)
            val, own = v
            return _rename(val, dict(zip(own, (f.maps[s].internal for s in map_idx), strict=True)), f, map_idx)
        return v
    if key in f.hyper_keys():
        return _hyper(f, key, pos)
    p = f.param(name, loop_idx, pos)
    if p is not None:
        return p
    ascii_key = name.ascii()
    real = real_hyper(f, ascii_key)
    if real is not None:
        return real if isinstance(real, Val) else const(f, real)
    if name.scripts and (s := f.size_of_name(text, pos, create=False)) is not None:
        # a size whose name starts like a parameter family (`W_img` beside `For h: W_h`) is the size,
        # not member `img` of the family
        return SizeVal(s)
    p = _param_member(f, name, loop_idx, text, pos)
    if p is not None:
        return p
    s = f.size_of_name(text, pos, create=False)
    if s is not None:
        return SizeVal(s)
    if name.base in ("π", "pi") and not name.scripts:
        return const(f, math.pi)
    if name.base == "e" and not name.scripts and not name.primes:
        return const(f, math.e)
    # Y¹, e_1, e_ℓ: a script that is a number or a size picks a member of a family.
    for i, (_kind, script) in enumerate(name.scripts):
        fam_key = key_with_placeholder(name, i)
        if fam_key in f.vars:
            return _member(f, f.vars[fam_key], script, text, pos)
    # x³, x^k, b^{−2(i−1)/d}, e^{x}: a power of a value
    if name.sups and (p := _scripted_power(f, text, name, pos)) is not None:
        return p
    raise f.unknown_name(text, pos)


def _scripted_power(f: Frame, text: str, name: Any, pos: Any) -> Val | None:
    """A name whose last superscript is an exponent: the token `b^{−2(i−1)/d}` is the base b to that power.
    None when the base names no value, so that an unknown name is reported as written."""
    script = name.sups[-1]
    exponent = parse_script(script, script_pos(text, script, pos))
    if exponent is None:
        return None
    base_name = name.without_script(script)
    try:
        inner = lookup(f, str(base_name), pos)
    except AlgError:
        return None
    if isinstance(inner, SizeVal):  # d^{2} of a size d: a number
        inner = size_val(f, inner.size, pos)
    if not isinstance(inner, Val):
        return None
    return real_power(f, Expr("name", (), pos, str(base_name)), exponent, pos, base=inner)


def real_hyper(f: Frame, key: str) -> float | Val | None:
    """A real hyperparameter's value by its ASCII name: passed to this algorithm or a caller (`F(X | b)`),
    set on the entry, or the config's."""
    g: Frame | None = f
    while g is not None:
        if key in g.reals:
            return g.reals[key]
        for name, v in g.hyper.items():
            if isinstance(v, Val) and v.kind == "real" and not v.dims and parse_name(name).ascii() == key:
                return v
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
    if declared and root.symbolic:
        return 1e-5  # checking without a config: any positive number, as the entry's own reals get
    return None


def _fmt_idx(idx: dict[str, int]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in idx.items()) or "these indices"


def key_with_placeholder(name: Any, i: int) -> str:
    scripts = list(name.scripts)
    kind, _ = scripts[i]
    sups = [("•" if j == i else s) for j, (k, s) in enumerate(scripts) if k == "^"]
    subs = [("•" if j == i else s) for j, (k, s) in enumerate(scripts) if k == "_"]
    return f"{name.base}{chr(39) * name.primes}^{','.join(sups)}_{','.join(subs)}"


def _member(f: Frame, fam: Any, script: str, text: str, pos: Any) -> Any:
    if isinstance(fam, Family):
        idx = script_int(f, script, pos, text)
        if (idx,) not in fam.members:
            raise f.error(UnknownNameError, f"{text} has not been assigned", pos)
        return fam.members[(idx,)]
    raise f.error(BadTypeError, f"{text}: a single member of a vectorised family cannot be taken; "
                  "use the whole family in a column list", pos)


_PLAIN = re.compile(r"[\w'′]+")
_PICKED = "⟨member⟩"  # stands for a script that picks a family member; no name can contain it


def _param_member(f: Frame, name: Name, loop_idx: dict[str, int], text: str, pos: Any) -> Any:
    """W_k^{⌈h/G⌉}, W_k^1: a script computed before run time picks a member of a parameter family
    (`For g ∈ [H_kv]: W^g_k …`). The member is that PARAM itself, so every head of a group reads one
    node and CSE shares what it computes; None when no family has this name."""
    active = f.active() | frozenset(loop_idx)
    for kind, script in name.scripts:
        if script in active:
            continue
        picked = _with_script(name, kind, script, _PICKED)
        indices = {**loop_idx, _PICKED: 0}
        e = f.params.get(picked.key(frozenset(indices) | f.active()))
        if e is None:
            continue
        try:
            member = script_int(f, script, pos)
        except AlgError:
            if not f.root().symbolic:
                raise
            member = 1  # checking without a config: ⌈h/G⌉ has no value, and every member has one shape
        var = e.fam_vars[list(picked.indices(frozenset(indices))).index(_PICKED)] \
            if len(e.fam_vars) == len(picked.indices(frozenset(indices))) else None
        count = _family_count(f, var) if var is not None else None
        if member < 1:
            raise f.error(BadTypeError, f"{text} picks member {member} of {e.decl.name}; members count from 1", pos)
        if count is not None and member > count:
            raise f.error(BadTypeError, f"{text} picks member {member} of {e.decl.name}, which is declared for "
                          f"{var} ∈ [{count}]", pos)
        return f.param(picked, {**loop_idx, _PICKED: member}, pos)
    return None


def _with_script(name: Name, kind: str, old: str, new: str) -> Name:
    if kind == "^":
        return Name(name.base, tuple(new if s == old else s for s in name.sups), name.subs, name.primes)
    return Name(name.base, name.sups, tuple(new if s == old else s for s in name.subs), name.primes)


def _family_count(f: Frame, var: str) -> int | None:
    """How many members `For var ∈ [n]:` declares, when n is known."""
    stack = list(f.alg.params)
    while stack:
        d = stack.pop()
        if d.kind == "family" and d.var == var and d.range is not None and d.range.dims:
            n = f.b.resolve(f.eval_size(d.range.dims[0]))
            return n.value if n.is_int else None
        stack.extend(d.members)
    return None


def script_int(f: Frame, script: str, pos: Any, name: str = "") -> int:
    """The member a script picks: a number, a size, or an integer expression of them and of unrolled-loop
    variables (Y^{⌈h/G⌉} inside `For h ∈ [H]`), evaluated before run time."""
    if script.isdigit():
        return int(script)
    # only a plain name is a size: parse_name would read `H + 1` as H
    s = f.size_of_name(script, pos, create=False) if _PLAIN.fullmatch(script) else None
    at = script_pos(name, script, pos)
    if s is None and (e := parse_script(script, at)) is not None:
        s = static_int(f, e)
    if s is not None and f.b.resolve(s).is_int:
        return f.b.resolve(s).value
    raise f.error(BadTypeError, f"cannot use {script} as an index here: a script that picks a member must be a "
                  "whole number known before the model runs (a number, a size, or an expression of them and "
                  "of loop variables such as ⌈h/G⌉)", at)


def script_pos(name: str, script: str, pos: Any) -> Any:
    """Where a script starts inside its name's token, so a mistake in it is pointed at."""
    at = name.find(script)
    return Pos(pos.file, pos.line, pos.col + at) if at >= 0 else pos


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


def _hyper(f: Frame, key: str, pos: Any) -> Any:
    """A hyperparameter's value; a mask passed to the algorithm is evaluated the first time it is read."""
    name = f.hyper_name(key)
    v = f.hyper[name]
    if not isinstance(v, Val):
        v = evaluate_mask(f, name, v, pos)
        f.hyper[name] = v
    return v
