"""Reductions, running sums and softmax → ONNX ReduceSum/ReduceMax/ReduceMean, CumSum and Softmax."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from pseudoformer.backends.onnx.emitter import Emitter
from pseudoformer.backends.onnx.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

_REDUCE = {Op.REDUCE_SUM: "ReduceSum", Op.REDUCE_MAX: "ReduceMax", Op.REDUCE_MEAN: "ReduceMean"}


@lowers(*_REDUCE)
def _reduce(e: Emitter, n: Node) -> str:
    x = e.value(n.src[0])
    axes = sorted(ax % n.src[0].type.rank for ax in n.attrs["axes"])
    keep = int(bool(n.attrs.get("keepdims", False)))
    op_type = _REDUCE[n.op]
    if not axes:  # "reduce nothing" to the IR, but "reduce everything" to ONNX
        return e.emit("Identity", [x], out=e.out)
    if op_type != "ReduceSum" and e.opset < 18:  # axes became an input in opset 18
        return e.emit(op_type, [x], out=e.out, axes=axes, keepdims=keep)
    return e.emit(op_type, [x, e.ints(axes)], out=e.out, keepdims=keep)


@lowers(Op.SOFTMAX)
def _softmax(e: Emitter, n: Node) -> str:
    return e.emit("Softmax", [e.value(n.src[0])], out=e.out, axis=n.attrs["axis"])


@lowers(Op.LOG_SOFTMAX)
def _log_softmax(e: Emitter, n: Node) -> str:
    return e.emit("LogSoftmax", [e.value(n.src[0])], out=e.out, axis=n.attrs["axis"])


@lowers(Op.CUMSUM)
def _cumsum(e: Emitter, n: Node) -> str:
    axis = e.const(np.asarray(n.attrs["axis"] % n.src[0].type.rank, dtype=np.int64), TensorProto.INT64)  # 0-D
    return e.emit("CumSum", [e.value(n.src[0]), axis], out=e.out)
