"""Values shaped like an operand, and a tensor as a matrix → ONNX (ir/ops/shaped_like.py, ir/ops/flatten.py):

    expand(c, like)              Expand(c, Shape(like)); a constant c: ConstantOfShape(Shape(like))
    pad(c, like, start; axis)    Pad(c): start zeros before on axis, size − start − m after
    flatten(x; axis)             Flatten(x)
    reshape_like(y, like)        Reshape(y, Shape(like))
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from pseudoformer.backends.onnx.emitter import ELEM, Emitter
from pseudoformer.backends.onnx.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op


@lowers(Op.EXPAND)
def _expand(e: Emitter, n: Node) -> str:
    c, like = n.src
    shape = e.emit("Shape", [e.value(like)])
    if c.op is Op.CONST and np.ndim(c.attrs["value"]) == 0:  # a fill: no constant tensor to read
        fill = helper.make_tensor("value", ELEM[n.dtype], [1], np.asarray([c.attrs["value"]]))
        return e.emit("ConstantOfShape", [shape], out=e.out, value=fill)
    return e.emit("Expand", [e.value(c), shape], out=e.out)


@lowers(Op.PAD)
def _pad(e: Emitter, n: Node) -> str:
    c, like, start = n.src
    rank, axis = like.type.rank, n.attrs["axis"] % like.type.rank
    before = e.emit("Unsqueeze", [e.value(start), e.ints([0])])
    after = e.emit("Sub", [e.emit("Sub", [e.shape_dim(e.value(like), axis), before]),
                           e.shape_dim(e.value(c), axis)])
    # pads: [begin of each axis, end of each axis], zero but on `axis`
    parts = [e.ints([0] * axis), before, e.ints([0] * (rank - 1)), after, e.ints([0] * (rank - axis - 1))]
    pads = e.emit("Concat", [p for p, size in zip(parts, (axis, 1, rank - 1, 1, rank - axis - 1), strict=True)
                             if size], axis=0)
    return e.emit("Pad", [e.value(c), pads], out=e.out, mode="constant")


@lowers(Op.FLATTEN)
def _flatten(e: Emitter, n: Node) -> str:
    return e.emit("Flatten", [e.value(n.src[0])], out=e.out, axis=n.attrs["axis"])


@lowers(Op.RESHAPE_LIKE)
def _reshape_like(e: Emitter, n: Node) -> str:
    return e.emit("Reshape", [e.value(n.src[0]), e.emit("Shape", [e.value(n.src[1])])], out=e.out)
