"""A frame: one algorithm being elaborated, with its sizes, variables, loop indices and parameter bindings."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from pseudoformer.base.errors import AlgError
from pseudoformer.base.limits import MAX_SIZE
from pseudoformer.frontend.ast import Algorithm, Decl, Expr, Type
from pseudoformer.frontend.errors import (
    BadTypeError,
    DuplicateError,
    HyperparameterError,
    ShapeError,
    UnknownNameError,
)
from pseudoformer.frontend.modules import Program
from pseudoformer.frontend.names import Name, parse_name
from pseudoformer.frontend.params import DuplicateParameter, Entry, GroupVal, entries, path
from pseudoformer.frontend.sizes import Size, formula, quotient, rounded
from pseudoformer.frontend.tensor_ops import ShapeMismatch, show_size, unify
from pseudoformer.frontend.values import Builder, Val
from pseudoformer.ir import DType, Op, TensorType


@dataclass
class Weights:
    """The model's parameters as they are created: name → PARAM node, with one type per name."""

    nodes: dict[str, Any] = field(default_factory=dict)


@dataclass
class MapVar:
    internal: str
    size: Size | None


@dataclass
class Frame:
    alg: Algorithm
    prog: Program
    b: Builder
    weights: Weights
    caller: Frame | None = None
    sizes: dict[str, Size] = field(default_factory=dict)  # by ASCII name
    reals: dict[str, float] = field(default_factory=dict)  # real-valued hyperparameters (ε)
    hyper: dict[str, Any] = field(default_factory=dict)  # Val | MaskDef, by ASCII name
    vars: dict[str, Any] = field(default_factory=dict)  # by name key
    loops: dict[str, int] = field(default_factory=dict)  # compile-time loop variables, 1-based
    maps: dict[str, MapVar] = field(default_factory=dict)  # vectorised index variables
    bound: dict[str, Any] = field(default_factory=dict)  # top parameter declarations bound by the caller
    scope: str = ""
    symbolic: bool = False  # checking without a config: sizes stay names
    config_used: set[str] = field(default_factory=set)
    config: dict[str, Any] | None = None
    runtime_dims: bool = False  # the entry: unknown input sizes become run-time dims

    def __post_init__(self) -> None:
        try:
            self.params: dict[str, Entry] = entries(self.alg.params)
        except DuplicateParameter as d:
            raise self.error(DuplicateError, f"parameter {d.second.decl.name} is declared twice in {self.alg.name} "
                             f"(first at line {d.first.decl.pos.line}); the two would share one weight",
                             d.second.decl.pos) from None
        self._declared: set[str] | None = None

    # ------------------------------------------------------------------ diagnostics
    def error(self, cls: type[AlgError], msg: str, pos: Any, notes: tuple[str, ...] = ()) -> AlgError:
        mod = self.prog.modules.get(pos.file) if pos is not None else None
        line = mod.line(pos.line) if mod is not None else None
        return cls(msg, pos, line, notes)

    def shape_error(self, e: ShapeMismatch, pos: Any) -> AlgError:
        return self.error(ShapeError, str(e), pos)

    # ------------------------------------------------------------------ names
    def active(self) -> frozenset[str]:
        return frozenset(self.loops) | frozenset(self.maps)

    def size_of_name(self, text: str, pos: Any, *, create: bool = True) -> Size | None:
        """A size named in a type or an expression: bound here, in a caller, in the config, or unknown."""
        key = parse_name(text).ascii()
        if key in self.sizes:
            return self.b.resolve(self.sizes[key])
        var = self.vars.get(parse_name(text).key())
        if var is not None and hasattr(var, "size") and not isinstance(var, Val):
            return var.size
        if self.caller is not None:  # a callee's own derived size (GQAttention's G = H / H_kv)
            derived = next((d for d in self.alg.hyper if d.kind == "derived" and parse_name(d.name).ascii() == key), None)
            if derived is not None and derived.value is not None:
                self.sizes[key] = self.eval_size(derived.value)
                return self.b.resolve(self.sizes[key])
        f: Frame | None = self.caller
        while f is not None:
            if key in f.sizes:
                self.sizes[key] = f.sizes[key]
                return self.b.resolve(f.sizes[key])
            f = f.caller
        root = self.root()
        if root.config is not None and key in root.config:
            v = root.config[key]
            root.config_used.add(key)
            if isinstance(v, bool) or not isinstance(v, int):
                raise self.error(HyperparameterError, f"{text} is a size, so it must be a whole number (got {v!r})", pos)
            if v < 1:  # a model of no layers, heads or features compiles, and computes nothing meaningful
                raise self.error(HyperparameterError, f"{text} is a size, so it must be at least 1 (got {v})", pos)
            if v > MAX_SIZE:
                raise self.error(HyperparameterError, f"{text} is a size, so it must be at most {MAX_SIZE:,} (a "
                                 f"dimension, and a product of two, must fit in int64; got {v:,})", pos)
            self.sizes[key] = Size.of(v)
            return self.sizes[key]
        if root.symbolic and self is root and (create or key in self.declared_sizes()):
            # checking without a config: the entry's own sizes stay symbols; a callee's implicit
            # sizes (MHAttention's d_out) are unknowns that unification fixes, as with a config.
            # A name in an expression is a size only if a declaration mentions it, else a typo
            # would pass `check` as a size of its own.
            self.sizes[key] = Size.of(key)
            return self.sizes[key]
        if root.symbolic and not create and key in {parse_name(d.name).ascii() for d in self.alg.hyper}:
            # checking without a config, a callee's own size hyperparameter that no caller binds and
            # only an expression reads (LoRA's rank r in `α / r`) is the size a config gives by its name
            self.sizes[key] = Size.of(key)
            return self.sizes[key]
        if not create:
            return None
        unknown = Size.of(self.b.fresh("?" + key))
        self.sizes[key] = unknown
        return unknown

    def declared_sizes(self) -> set[str]:
        """ASCII names of the sizes the algorithm's declarations mention: hyperparameters and type dims."""
        if self._declared is None:
            names: set[str] = set()

            def walk_expr(e: Any) -> None:
                if isinstance(e, Expr):
                    if e.op == "name":
                        names.add(parse_name(e.text).ascii())
                    for a in e.args:
                        walk_expr(a)
                elif isinstance(e, tuple):
                    for a in e:
                        walk_expr(a)

            def walk(decls: list[Decl]) -> None:
                for d in decls:
                    for t in (d.type, d.range):
                        if t is not None:
                            walk_expr(t.dims)
                    walk_expr(d.value)
                    walk(d.members)

            alg = self.alg
            walk(alg.inputs + alg.output_decls + alg.params + alg.hyper)
            names |= {parse_name(d.name).ascii() for d in alg.hyper}
            self._declared = names
        return self._declared

    def root(self) -> Frame:
        f = self
        while f.caller is not None:
            f = f.caller
        return f

    def unknown_name(self, text: str, pos: Any) -> AlgError:
        known = [_key_text(k) for k in self.vars] + [str(e.name) for e in self.params.values()] + list(self.sizes)
        close = difflib.get_close_matches(text, known, n=1)
        notes = (f"did you mean {close[0]}?",) if close else ()
        return self.error(UnknownNameError, f"unknown name {text}", pos, notes)

    # ------------------------------------------------------------------ types
    def eval_size(self, e: Expr, bind: dict[str, Size] | None = None) -> Size:
        size = self._eval_size(e)
        if size.is_int and size.value < 1:  # ℝ^{d − 5} with d = 4: no tensor has -1 rows
            raise self.error(HyperparameterError, f"this size is {size.value}; a size must be at least 1", e.pos)
        return size

    def _eval_size(self, e: Expr) -> Size:
        if e.op == "number":
            return Size.of(int(e.args[0]))
        if e.op == "name":
            return self.size_of_name(e.text, e.pos)  # type: ignore[return-value]
        if e.op == "call" and e.text == "length":
            arg = e.args[0][0]
            v = self.vars.get(parse_name(arg.text).key())
            if not isinstance(v, Val) or len(v.dims) != 1:
                raise self.error(BadTypeError, f"length() needs a sequence, and {arg.text} is not one", arg.pos)
            return v.dims[0]
        if e.op in ("add", "sub", "juxt", "div"):
            x, y = (self.eval_size(a) for a in e.args)
            if e.op == "add":
                return x + y
            if e.op == "sub":
                return x - y
            if e.op == "juxt":
                return x * y
            q = x.div(y)
            if q is None and self.root().symbolic and not (x.is_int and y.is_int) and y != Size.of(0):
                # checking without a config: ℝ^{d/2} has d/2 rows, G = H / H_kv is a size of its own
                return quotient(x, y.value if y.is_int else y)
            if q is None:
                raise self.error(ShapeError, f"{x} is not divisible by {y}", e.pos)
            return q
        if e.op in ("floor", "ceil", "mod"):
            return self._rounded_size(e)
        raise self.error(BadTypeError, "expected a size", e.pos)

    def _rounded_size(self, e: Expr) -> Size:
        """⌈d/2⌉, ⌊d/2⌋, d mod 2 in a declaration: a size when values or an exact division give one; else,
        checking without a config or of a size the graph computes, the size named by its formula."""
        parts = e.args if e.op == "mod" else e.args[0].args if e.args[0].op == "div" else (e.args[0],)
        num = self.b.resolve(self._eval_size(parts[0]))
        den = self.b.resolve(self._eval_size(parts[1])) if len(parts) > 1 else Size.of(1)
        if den == Size.of(0):
            raise self.error(ShapeError, "this size divides by 0", e.pos)
        r = rounded(e.op, num, den)
        if r is not None:
            return r
        named = formula(e.op, num, den)
        if self.root().symbolic or str(named) in self.b.run_dims:
            return named
        raise self.error(ShapeError, f"{show_size(named)} is known only when the model runs, so it cannot size "
                         "a declaration", e.pos)

    def bind_dims(self, typ: Type, actual: tuple[Size, ...], what: str, pos: Any) -> None:
        """Unify a declared type's dims with actual sizes, binding names seen for the first time."""
        if len(typ.dims) != len(actual):
            n = len(typ.dims)
            shape = " × ".join(_show(self.b.resolve(a)) for a in actual) or "a scalar"
            raise self.error(ShapeError, f"{what} should have {n} dim{'s' if n != 1 else ''}, but has "
                             f"{len(actual)} ({shape})", pos)
        for d, a in zip(typ.dims, actual, strict=True):
            if d.op == "name" and parse_name(d.text).ascii() not in self.sizes:
                self.sizes[parse_name(d.text).ascii()] = a
                continue
            want = self.eval_size(d)
            try:
                unify(self.b, want, a, what)
            except ShapeMismatch:
                want_s = _show(self.b.resolve(want))
                # ℓ written `ell` is still just ℓ, not `ell = ℓ`
                named = d.op == "name" and _show(Size.of(parse_name(d.text).ascii())) == want_s
                expect = _text(d) if named or want_s == _text(d) else f"{_text(d)} = {want_s}"
                raise self.error(ShapeError, f"{what}: expected size {expect}, got {_show(self.b.resolve(a))}",
                                 pos) from None

    # ------------------------------------------------------------------ hyperparameters
    def hyper_keys(self) -> set[str]:
        return {parse_name(k).key() for k in self.hyper}

    def hyper_name(self, key: str) -> str:
        """The hyperparameter's name as this frame holds it (its value, hyper[name], may be an unevaluated mask)."""
        return next(k for k in self.hyper if parse_name(k).key() == key)

    # ------------------------------------------------------------------ parameters
    def param(self, name: Name, indices: dict[str, int], pos: Any) -> Any:
        """Resolve a parameter name (with its index values) to a Val or a GroupVal; None if not a parameter."""
        key = name.key(frozenset(indices) | self.active())
        e = self.params.get(key)
        if e is None:
            return None
        fam_idx = dict(zip(e.fam_vars, (indices[v] for v in _index_order(name, e, indices)), strict=False))
        top = e
        while top.parent is not None:
            top = top.parent
        binding = self.bound.get(top.decl.name)
        if binding is None and self.caller is not None and top.decl.name in self.alg.param_args:
            raise self.error(BadTypeError, f"parameter {top.decl.name} of {self.alg.name} was not passed", pos)
        if isinstance(binding, Val):
            return binding
        if isinstance(binding, GroupVal) and not binding.abstract:
            m = binding.member(e.plain_key)
            if m is None:
                raise self.error(UnknownNameError, f"{binding.entry.decl.name} has no member {name}", pos)
            val = binding.frame.make_param(m, {**binding.indices, **fam_idx}, binding.prefix, binding.entry, pos)
            if e.decl.kind == "typed" and isinstance(val, Val):
                self.bind_dims(e.decl.type, val.dims, f"parameter {name}", pos)
            return val
        prefix = binding.prefix if isinstance(binding, GroupVal) else ""
        start = top if isinstance(binding, GroupVal) else None
        return self.make_param(e, fam_idx, prefix, start, pos)

    def make_param(self, e: Entry, idx: dict[str, int], prefix: str, start: Entry | None, pos: Any) -> Any:
        parts = e.parts[len(start.parts):] if start is not None else e.parts
        missing = [v for kind, v in parts if kind == "fam" and v not in idx]
        if missing:  # declared under `For l ∈ [L]:` but used where no l is given: which layer's?
            v = missing[0]
            raise self.error(BadTypeError, f"{e.decl.name} is declared for each {v} (under `For {v} ∈ …`); "
                             f"use it inside a loop over {v}, with {v} in its name", pos)
        if e.decl.kind in ("group", "alg_group"):
            p = path(e, idx, prefix, start) if e.decl.kind == "alg_group" else path(e, idx, prefix, start)
            return GroupVal(e, p, self, dict(idx), alg=e.decl.alg, abstract=e.decl.kind == "alg_group")
        if e.decl.kind != "typed":
            raise self.error(BadTypeError, f"{e.decl.name} is not a parameter", pos)
        full = path(e, idx, prefix, start)
        dims = tuple(self.eval_size(d) for d in e.decl.type.dims)
        node = self.weights.nodes.get(full)
        shape = tuple(self.b.resolve(d).dim() for d in dims)
        if node is None:
            old_span, self.b.span = self.b.span, None
            node = self.b.node(Op.PARAM, name=full, type=TensorType(DType.float32, shape))
            self.b.span = old_span
            self.weights.nodes[full] = node
        elif node.type.shape != shape:
            # A group shared by several calls (one MHAttention for every layer): a size the callee leaves to
            # be found from its result (d_out) is still open at this call; the parameter made by the first
            # call fixes it.
            if len(node.type.shape) == len(dims):
                try:
                    for d, have in zip(dims, node.type.shape, strict=True):
                        unify(self.b, d, Size.of(have), f"parameter {full}")
                except ShapeMismatch:
                    pass
                shape = tuple(self.b.resolve(d).dim() for d in dims)
            if node.type.shape != shape:
                raise self.error(ShapeError, f"parameter {full} is used with shape {shape} here but "
                                 f"{node.type.shape} elsewhere", pos)
        return Val(node, "real", dims)


def _index_order(name: Name, e: Entry, indices: dict[str, int]) -> list[str]:
    """The body's index variables in the order the declaration's family variables appear in the name."""
    used = [s for _, s in name.scripts if s in indices]
    return used if len(used) == len(e.fam_vars) else list(indices)


def _key_text(key: str) -> str:
    """A variable key (base^sups_subs, index scripts as •) written as a name: γ^1_• → γ^1_•, m^_ → m."""
    base, _, rest = key.partition("^")
    sups, _, subs = rest.partition("_")
    return base + (f"^{sups}" if sups else "") + (f"_{subs}" if subs else "")


def _show(s: Size) -> str:
    return show_size(s)


def _text(e: Expr) -> str:
    """A size expression as the source writes it, near enough for a message: `H d_mid`, `length(x)`."""
    if e.op == "call":
        return f"{e.text}({', '.join(_text(a) for a in e.args[0])})"
    if e.text or e.op == "number":
        return e.text or str(e.args[0])
    sep = {"add": " + ", "sub": " − ", "juxt": " ", "div": " / "}.get(e.op)
    if sep is None:
        return e.op
    return sep.join(f"({_text(a)})" if a.op in ("add", "sub") else _text(a) for a in e.args)
