"""The rotary embedding → Relax: one injective PrimFunc after fusion."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pseudoformer.backends.tvm.lowerings.registry import R, lowers, tirx
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

if TYPE_CHECKING:
    from pseudoformer.backends.tvm.lower import RelaxLowering

@lowers(Op.ROTARY)
def _rotary(lw: RelaxLowering, n: Node) -> Any:
    # One injective PrimFunc after fusion: slices, products and the concatenation of the two halves.
    x, c, s = (lw.tensor(t) for t in n.src)
    heads = int(n.attrs.get("heads", 0))
    axis = n.attrs["axis"] % n.src[0].type.rank
    shape = lw.shape(x)
    if heads:
        x = lw.emit(R.reshape(x, [*shape[:-1], tirx.IntImm("int64", heads), shape[-1] // heads]))
        c, s = lw.emit(R.expand_dims(c, [-2])), lw.emit(R.expand_dims(s, [-2]))
        axis += 1
    width = int(n.src[0].shape[n.attrs["axis"]]) // max(heads, 1)
    half = int(n.attrs.get("rotary_dim", 0) or width) // 2  # a partial rotation passes x[2·half:] as it is
    x1 = lw.emit(R.strided_slice(x, [axis], [0], [half]))
    x2 = lw.emit(R.strided_slice(x, [axis], [half], [2 * half]))
    y1 = R.subtract(R.multiply(x1, c), R.multiply(x2, s))
    y2 = R.add(R.multiply(x2, c), R.multiply(x1, s))
    rest = [lw.emit(R.strided_slice(x, [axis], [2 * half], [width]))] if 2 * half < width else []
    y = R.concat([lw.emit(y1), lw.emit(y2), *rest], axis=axis)
    return R.reshape(lw.emit(y), shape) if heads else y
