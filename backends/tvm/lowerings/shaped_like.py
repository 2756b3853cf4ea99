"""Values shaped like an operand, and a tensor as a matrix → Relax (ir/ops/shaped_like.py, ir/ops/flatten.py):
broadcast_to like's shape; a pad as zeros joined on both sides of c (Relax's pad takes only fixed widths,
and a slice's start may be known only at run time); flatten and reshape_like as reshapes to the sizes Relax
tracks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pseudoformer.backends.tvm.lowerings.registry import R, lowers, relax, tirx
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

if TYPE_CHECKING:
    from pseudoformer.backends.tvm.lower import RelaxLowering


@lowers(Op.EXPAND)
def _expand(lw: RelaxLowering, n: Node) -> Any:
    like = lw.tensor(n.src[1])
    return R.where(R.less(like, like), relax.const(0.0, n.dtype.value), lw.tensor(n.src[0]))


@lowers(Op.PAD)
def _pad(lw: RelaxLowering, n: Node) -> Any:
    c, like, start = n.src
    axis = n.attrs["axis"] % like.type.rank
    x = lw.tensor(c)
    dims = lw.shape(x)
    before = lw.size(start)
    size = lw.shape(lw.tensor(like))[axis]
    after = size - before - dims[axis]
    # As the interpreter refuses it: c must fit at start (the zeros would take a negative size otherwise).
    fits = lw.emit(R.reshape(R.shape_to_tensor(relax.ShapeExpr([tirx.Select(
        tirx.all(before >= 0, after >= 0), tirx.IntImm("int64", 1), tirx.IntImm("int64", 0))])), ()))
    where = f"pad at {n.span or n.scope or f'%{lw.index}'}"
    lw.bb.emit(R.assert_op(R.astype(fits, "bool"), [lw.tensor(start)],
                           f"{where}: {dims[axis]} positions do not fit at {{}} in an axis of size {size}"))

    def zeros(width: Any) -> Any:
        return lw.emit(R.zeros(relax.ShapeExpr([*dims[:axis], width, *dims[axis + 1:]]), n.dtype.value))

    return R.concat([zeros(before), x, zeros(after)], axis=axis)


def _product(dims: list[Any]) -> Any:
    out: Any = tirx.IntImm("int64", 1)
    for d in dims:
        out = out * d
    return out


@lowers(Op.FLATTEN)
def _flatten(lw: RelaxLowering, n: Node) -> Any:
    x, axis = lw.tensor(n.src[0]), n.attrs["axis"]
    dims = lw.shape(x)
    return R.reshape(x, [_product(dims[:axis]), _product(dims[axis:])])


@lowers(Op.RESHAPE_LIKE)
def _reshape_like(lw: RelaxLowering, n: Node) -> Any:
    return R.reshape(lw.tensor(n.src[0]), lw.shape(lw.tensor(n.src[1])))
