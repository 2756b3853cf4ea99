"""Run-time sizes → ONNX: an axis's size from Shape, ranges, index masks."""

from __future__ import annotations

from onnx import TensorProto

from pseudoformer.backends.onnx.emitter import Emitter
from pseudoformer.backends.onnx.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

_RELATION = {"<": "Less", "<=": "LessOrEqual", ">": "Greater", ">=": "GreaterOrEqual", "==": "Equal"}


@lowers(Op.DIM)
def _dim(e: Emitter, n: Node) -> str:
    src = n.src[0]
    axis = n.attrs["axis"] % src.type.rank
    if isinstance(src.shape[axis], int):  # a static size needs no run-time Shape
        return e.const(src.shape[axis], TensorProto.INT64, out=e.out)
    if src.shape[axis] in e.sizes:  # the past length of a cache kept in longer buffers
        return e.emit("Squeeze", [e.sizes[src.shape[axis]], e.ints([0])], out=e.out)
    if e.capture:  # off a graph input where it is one of its dims: a size onnxruntime folds once the sizes are fixed
        return e.emit("Squeeze", [e.size_of(src.shape[axis], (e.value(src), axis)), e.ints([0])], out=e.out)
    return e.emit("Squeeze", [e.shape_dim(e.value(src), axis), e.ints([0])], out=e.out)


def reads_length(e: Emitter, n: Node) -> bool:
    """Whether the value of `n` depends on a graph input's values or on a size given as an input (the past length
    of a cache in buffers): in a step for CUDA graphs, a value on the device (Emitter.capture)."""
    seen: set[int] = set()
    todo = [n]
    while todo:
        m = todo.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        if m.op is Op.INPUT:
            return True
        if m.op is Op.DIM:  # reads its operand's shape alone
            if m.src[0].shape[m.attrs["axis"] % m.src[0].type.rank] in e.sizes:
                return True
            continue
        todo.extend(m.src)
    return False


@lowers(Op.ARANGE)
def _arange(e: Emitter, n: Node) -> str:
    return e.range(e.value(n.src[0]), out=e.out)


@lowers(Op.INDEX_MASK)
def _index_mask(e: Emitter, n: Node) -> str:
    rows = e.emit("Unsqueeze", [e.range(e.value(n.src[0])), e.ints([1])])
    cols = e.range(e.value(n.src[1]))
    rel = n.attrs["rel"]
    if rel == "!=":
        return e.emit("Not", [e.emit("Equal", [rows, cols])], out=e.out)
    return e.emit(_RELATION[rel], [rows, cols], out=e.out)
