"""Mask hyperparameters: `Mask ≡ 1`, `Mask[t, t'] = [[t ≤ t']]`, or a mask passed along by name."""

from __future__ import annotations

from typing import Any

from pseudoformer.frontend.errors import BadTypeError, HyperparameterError
from pseudoformer.frontend.expressions.core import ev_val
from pseudoformer.frontend.frame import Frame, MapVar
from pseudoformer.frontend.tensor_ops import free_to_dim
from pseudoformer.frontend.values import MaskDef, Val
from pseudoformer.ir import DType


def declared_dims(f: Frame, name: str, pos: Any) -> tuple:
    for d in f.alg.hyper:
        if d.name == name and d.type is not None and d.type.kind == "bool":
            return tuple(f.eval_size(x) for x in d.type.dims)
    raise f.error(HyperparameterError, f"{name} is not a mask hyperparameter of {f.alg.name}", pos)


def evaluate_mask(f: Frame, name: str, spec: Any, pos: Any) -> Val:
    """Evaluate a mask definition at the shape the algorithm declares for it."""
    if not isinstance(spec, MaskDef):
        raise f.error(BadTypeError, f"{name} has no value", pos)
    dims = declared_dims(f, name, pos)
    g: Frame = spec.frame
    if not spec.vars:
        v = ev_val(g, spec.body)
        if v.const in (1, 1.0, True):
            return Val(f.b.const(True, DType.bool), "bool", const=True)
        if v.const in (0, 0.0, False):
            return Val(f.b.const(False, DType.bool), "bool", const=False)
        if v.kind != "bool":
            raise f.error(BadTypeError, f"{name} must be a {{0,1}} matrix", spec.body.pos)
        return v
    if len(spec.vars) != len(dims):
        raise f.error(BadTypeError, f"{name} has {len(dims)} indices, not {len(spec.vars)}", spec.body.pos)
    saved = {v: g.maps.get(v) for v in spec.vars}
    internals = []
    for var, size in zip(spec.vars, dims, strict=True):
        mv = MapVar(g.b.fresh(var), size)
        g.maps[var] = mv
        internals.append(mv.internal)
    try:
        v = ev_val(g, spec.body)
    finally:
        for var, old in saved.items():
            if old is None:
                g.maps.pop(var, None)
            else:
                g.maps[var] = old
    if isinstance(v.const, bool) or v.const in (0, 1):
        return Val(f.b.const(bool(v.const), DType.bool), "bool", const=bool(v.const))
    for internal in internals:
        if internal not in v.free_vars:
            raise f.error(BadTypeError, f"the definition of {name} does not use all its indices", spec.body.pos)
        v = free_to_dim(f.b, v, internal)
    if v.kind != "bool":
        raise f.error(BadTypeError, f"{name} must be a {{0,1}} matrix: write it with an Iverson bracket [[…]]",
                      spec.body.pos)
    return v
