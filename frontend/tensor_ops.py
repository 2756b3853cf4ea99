"""Tensor operations on labelled values: alignment by label, then one IR op.

Each function takes paper-level operands (Vals) and emits the few IR nodes that compute the
result in the Val layout [batch?] + dims + free vars. Shape mistakes raise ShapeMismatch with a
paper-level description; the elaborator turns it into a positioned ShapeError.
"""

from __future__ import annotations

import re
from dataclasses import replace

from pseudoformer.frontend.sizes import BROADCAST, ONE, Size
from pseudoformer.frontend.values import Builder, Label, Val, labels
from pseudoformer.ir import DType, Node, Op


class ShapeMismatch(Exception):
    pass


def show(v: Val) -> str:
    kind = {"real": "ℝ", "bool": "{0,1}", "token": "V", "index": "ℕ"}[v.kind]
    body = kind if not v.dims else f"{kind}^{{{' × '.join(show_size(d) for d in v.dims)}}}"
    if v.free:
        body += " for " + ", ".join(f"{n.split('#')[0]} ∈ [{show_size(s)}]" for n, s in v.free)
    return body


def show_size(s: Size) -> str:
    """A size as the paper writes it: unknowns without their `?…#n` marks, ℓ for the ASCII key `ell`."""
    if s == BROADCAST:
        return "1"
    return re.sub(r"\bell(?![A-Za-z0-9])", "ℓ", re.sub(r"#\d+", "", str(s).replace("?", "")))


def unify(b: Builder, x: Size, y: Size, what: str) -> Size:
    x, y = b.resolve(x), b.resolve(y)
    if x == y or y == BROADCAST:
        return x
    if x == BROADCAST:
        return y
    for u, other in ((x, y), (y, x)):
        solved = _solve_linear(u, other)
        if solved is not None:
            b.solve(*solved)
            return other
    raise ShapeMismatch(f"{what}: sizes {show_size(x)} and {show_size(y)} differ")


def _solve_linear(u: Size, other: Size) -> tuple[str, Size] | None:
    """The unknown of `u = other` when `u` is linear in one unknown that no other term holds: `?d_mid = d`,
    and also `H·?d_mid = H·d_mid` — the rows of the H heads of an algorithm group whose per-head size
    only the callee names, met by the caller's `W_o ∈ ℝ^{d × d_mid H}` — or `?n + 1 = ℓ`. None otherwise."""
    unknowns = u.unknowns
    if len(unknowns) != 1 or other.unknowns & unknowns:
        return None
    (name,) = unknowns
    with_u = [(m, c) for m, c in u.terms if name in m]
    if len(with_u) != 1 or with_u[0][0].count(name) != 1:
        return None
    (mono, coef), = with_u
    rest = Size(tuple(t for t in u.terms if t != (mono, coef)))
    factor = Size.of(coef)
    for f in mono:
        if f != name:
            factor = factor * Size.of(f)
    value = (other - rest).div(factor) if len(factor.terms) == 1 else None
    if value is None or not value.terms or value.is_int and value.value < 1:  # no size is 0 or less
        return None
    return name, value


def to_layout(b: Builder, v: Val, target: list[Label], own: list[Label] | None = None) -> Node:
    """Transpose v's axes into the order of `target` and insert unit axes for labels v lacks
    (except a missing leading batch axis, which broadcasting supplies)."""
    cur = own if own is not None else labels(v)
    present = [lab for lab in target if lab in cur]
    node = v.node
    if present != cur:
        perm = [cur.index(lab) for lab in present]
        node = b.node(Op.TRANSPOSE, node, perm=perm)
    # Labels missing before the first present one are leading axes: broadcasting supplies them.
    first = next((i for i, lab in enumerate(target) if lab in cur), len(target))
    missing = [i - first for i, lab in enumerate(target) if lab not in cur and i > first]
    if missing:
        node = b.node(Op.UNSQUEEZE, node, axes=missing)
    return node


def merged_free(b: Builder, vals: list[Val]) -> tuple[tuple[str, Size], ...]:
    out: dict[str, Size] = {}
    for v in vals:
        for name, size in v.free:
            if name in out:
                out[name] = unify(b, out[name], size, f"index {name.split('#')[0]}")
            else:
                out[name] = size
    return tuple(out.items())


def broadcast_dims(b: Builder, vals: list[Val], what: str) -> tuple[Size, ...]:
    ranked = [v for v in vals if v.dims]
    if not ranked:
        return ()
    rank = len(ranked[0].dims)
    if any(len(v.dims) != rank for v in ranked):
        raise ShapeMismatch(f"{what} of {' and '.join(show(v) for v in vals)}")
    dims = list(ranked[0].dims)
    for v in ranked[1:]:
        dims = [unify(b, x, y, what) for x, y in zip(dims, v.dims, strict=True)]
    return tuple(dims)


def elementwise(b: Builder, op: Op, vals: list[Val], what: str, kind: str | None = None) -> Val:
    """Apply a broadcasting op to operands of equal paper shape (scalars broadcast; so do `1ᵀ` rows)."""
    try:
        dims = broadcast_dims(b, vals, what)
    except ShapeMismatch:
        raise ShapeMismatch(f"cannot {what} {' and '.join(show(v) for v in vals)}") from None
    free = merged_free(b, vals)
    batched = any(v.batched for v in vals)
    target: list[Label] = [("b", None)] if batched else []
    target += [("d", i) for i in range(len(dims))] + [("f", n) for n, _ in free]
    nodes = [to_layout(b, v, target) for v in vals]
    out_kind = kind or ("bool" if op in (Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE) else vals[-1].kind)
    dtype_kind = [v for v in vals if v.kind == "real"]
    if dtype_kind and op not in (Op.WHERE,):
        nodes = [n if n.dtype is DType.float32 else b.node(Op.CAST, n, dtype=DType.float32) for n in nodes]
    const = None
    return Val(b.node(op, *nodes), out_kind, dims, free, batched, const)


def unary(b: Builder, op: Op, v: Val, **attrs: object) -> Val:
    node = v.node if op is Op.NOT else cast_real(b, v).node
    return replace(v, node=b.node(op, node, **attrs), const=None,
                   kind="bool" if op is Op.NOT else "real")


def transpose(b: Builder, v: Val) -> Val:
    a0 = v.paper_axis0
    if len(v.dims) == 1:  # a column vector becomes a row
        return replace(v, node=b.node(Op.UNSQUEEZE, v.node, axes=[a0]), dims=(ONE, v.dims[0]), const=None)
    if len(v.dims) != 2:
        raise ShapeMismatch(f"cannot transpose {show(v)}")
    perm = list(range(v.node.type.rank))
    perm[a0], perm[a0 + 1] = perm[a0 + 1], perm[a0]
    return replace(v, node=b.node(Op.TRANSPOSE, v.node, perm=perm), dims=(v.dims[1], v.dims[0]), const=None)


def product(b: Builder, x: Val, y: Val) -> Val:
    """Juxtaposition and `·`: scalar scaling, or a matrix product with the paper's column vectors."""
    if not x.dims or not y.dims:
        return elementwise(b, Op.MUL, [x, y], "multiply")
    if x.const == "ones_row" and len(y.dims) in (1, 2):
        # 1ᵀ v sums a column: 1ᵀ X is the row of X's column sums
        summed = reduce_dims(b, y, [0])
        if len(y.dims) == 1:
            return summed
        row = b.node(Op.UNSQUEEZE, summed.node, axes=[summed.paper_axis0])
        return replace(summed, node=row, dims=(ONE, summed.dims[0]))
    if len(x.dims) == 1 and len(y.dims) == 2 and y.dims[0] == ONE:
        # the outer product v wᵀ; `b 1ᵀ`, a bias broadcast over positions, is the common case
        col = replace(x, node=b.node(Op.UNSQUEEZE, x.node, axes=[x.paper_axis0 + 1]), dims=(x.dims[0], BROADCAST),
                      const=None)
        if y.const == "ones_row":
            return col
        return elementwise(b, Op.MUL, [col, replace(y, dims=(BROADCAST, y.dims[1]))], "multiply")
    if len(x.dims) != 2:
        raise ShapeMismatch(f"cannot multiply {show(x)} by {show(y)}")
    unify(b, x.dims[1], y.dims[0], f"matrix product {show(x)} · {show(y)}")
    if x.dims[0] == ONE and len(y.dims) == 1:
        # a row times a column: a dot product, which may carry y's free variables
        xs = replace(x, node=b.node(Op.SQUEEZE, x.node, axes=[x.paper_axis0]), dims=(x.dims[1],))
        prod = elementwise(b, Op.MUL, [xs, y], "multiply")
        return reduce_dims(b, prod, [0])
    if x.free:
        raise ShapeMismatch(f"a matrix that depends on an index ({show(x)}) cannot multiply here; "
                            "write the product outside the loop")
    if len(y.dims) == 1:
        if len(y.free) == 1:  # columns of a map: a plain matrix product
            out = b.node(Op.MATMUL, x.node, y.node)
            return Val(out, "real", (x.dims[0],), y.free, x.batched or y.batched)
        if not y.free:
            col = b.node(Op.UNSQUEEZE, y.node, axes=[y.node.type.rank])
            out = b.node(Op.SQUEEZE, b.node(Op.MATMUL, x.node, col), axes=[-1])
            return Val(out, "real", (x.dims[0],), (), x.batched or y.batched)
        raise ShapeMismatch(f"cannot multiply {show(x)} by {show(y)} (more than one index)")
    if y.free:
        raise ShapeMismatch(f"cannot multiply {show(x)} by {show(y)}")
    return Val(b.node(Op.MATMUL, x.node, y.node), "real", (x.dims[0], y.dims[1]), (), x.batched or y.batched)


def reduce_dims(b: Builder, v: Val, dims: list[int]) -> Val:
    v = _summable(b, v)
    axes = [v.paper_axis0 + d for d in dims]
    node = b.node(Op.REDUCE_SUM, v.node, axes=axes, keepdims=False)
    return Val(node, v.kind, tuple(d for i, d in enumerate(v.dims) if i not in dims), v.free, v.batched)


def _summable(b: Builder, v: Val) -> Val:
    # An Iverson bracket [[…]] is the number 0 or 1: a sum of brackets counts, it does not OR.
    return cast_real(b, v) if v.node.dtype is DType.bool else v


def reduce_free(b: Builder, v: Val, var: str) -> Val:
    v = _summable(b, v)
    axis = labels(v).index(("f", var))
    node = b.node(Op.REDUCE_SUM, v.node, axes=[axis], keepdims=False)
    return Val(node, v.kind, v.dims, tuple(f for f in v.free if f[0] != var), v.batched)


def dim_to_free(b: Builder, v: Val, i: int, var: str) -> Val:
    """View paper dim i as free variable `var`, the first free one (no data movement when i is the last dim)."""
    cur = labels(v)
    rest = [x for x in range(len(v.dims)) if x != i]
    order = [("b", None)] * v.batched + [("d", x) for x in rest] + [("d", i)] + [("f", n) for n, _ in v.free]
    node = v.node if cur == order else b.node(Op.TRANSPOSE, v.node, perm=[cur.index(lab) for lab in order])
    return Val(node, v.kind, tuple(v.dims[x] for x in rest), ((var, v.dims[i]),) + v.free, v.batched, v.const)


def free_to_dim(b: Builder, v: Val, var: str) -> Val:
    """Make free variable `var` the last paper dim: a per-column vector becomes a matrix."""
    size = v.free_size(var)
    assert size is not None
    target: list[Label] = [("b", None)] * v.batched + [("d", i) for i in range(len(v.dims))] + [("f", var)]
    target += [("f", n) for n, _ in v.free if n != var]
    node = to_layout(b, v, target)
    return Val(node, v.kind, v.dims + (size,), tuple(f for f in v.free if f[0] != var), v.batched)


def softmax_columns(b: Builder, v: Val) -> Val:
    if not v.dims:
        raise ShapeMismatch(f"softmax of {show(v)}: it needs a vector or a matrix")
    return replace(v, node=b.node(Op.SOFTMAX, v.node, axis=v.paper_axis0), const=None)


def cast_real(b: Builder, v: Val) -> Val:
    if v.node.dtype is DType.float32:
        return v
    node = b.node(Op.CAST, v.node, dtype=DType.float32)
    if v.kind == "index":  # positions are 0-based in the graph, but count from 1 in the paper: [[t = 1]]
        node = b.node(Op.ADD, node, b.const(1.0))
    return replace(v, node=node, kind="real", const=None)


def per_example(b: Builder, v: Val) -> Val:
    """A value shared by every example, repeated along the batch axis: what a learned [class] column becomes
    when it is joined to per-example columns (`[x_cls, E]`). `where(true[batch, 1, …], v, v)` repeats it
    exactly (an ADD of zeros would turn ∞ − ∞ into NaN); the batch size is read off an input."""
    if v.batched:
        return v
    batch = b.run_dims["batch"]
    rank = v.node.type.rank
    keep = b.node(Op.GE, b.node(Op.ARANGE, batch, dim="batch"), b.const(0, DType.int64))
    if rank:
        keep = b.node(Op.UNSQUEEZE, keep, axes=list(range(1, rank + 1)))
    return replace(v, node=b.node(Op.WHERE, keep, v.node, v.node), batched=True, const=None)
