"""EXPERT_MATMUL → the rows grouped by expert, in standard ONNX ops: for each expert e (a number known when the
model is compiled), NonZero(routes = e) finds its rows, one Gather takes them, one MatMul by W[e]ᵀ computes them;
one ScatterND puts every expert's results back in row order. The work is the rows' (k per token for top-k
routing), whatever the number of experts, and no expert's matrix is copied per row: ONNX Runtime folds W's
transpose and each expert's Gather of it, an initializer, into constants once."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from pseudoformer.backends.onnx.emitter import ELEM, Emitter
from pseudoformer.backends.onnx.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op


def _grouped(n: Node, opset: int) -> bool:
    return isinstance(n.src[0].type.shape[0], int) and isinstance(n.src[0].type.shape[1], int) \
        and isinstance(n.src[0].type.shape[2], int)


@lowers(Op.EXPERT_MATMUL, when=_grouped)
def _expert_matmul(e: Emitter, n: Node) -> str:
    w, r, x = n.src
    experts, out_dim, in_dim = w.type.shape
    routes = e.emit("Reshape", [e.value(r), e.ints([-1])])  # [N]
    r_shape = e.emit("Shape", [e.value(r)])
    full = e.emit("Concat", [r_shape, e.ints([in_dim])], axis=0)
    rows = e.emit("Reshape", [e.emit("Expand", [e.value(x), full]), e.ints([-1, in_dim])])  # [N, m]
    w_t = e.emit("Transpose", [e.value(w)], perm=[0, 2, 1])  # [E, m, n]
    where, parts = [], []
    for k in range(experts):
        expert = e.const(np.asarray(k, dtype=np.int64), TensorProto.INT64)
        mine = e.emit("Reshape", [e.emit("NonZero", [e.emit("Equal", [routes, expert])]), e.ints([-1])])  # [N_k]
        parts.append(e.emit("MatMul", [e.emit("Gather", [rows, mine], axis=0),
                                       e.emit("Gather", [w_t, expert], axis=0)]))  # [N_k, n]
        where.append(mine)
    values = e.emit("Concat", parts, axis=0)  # [N, n], rows in expert order
    at = e.emit("Unsqueeze", [e.emit("Concat", where, axis=0), e.ints([1])])  # [N, 1]: each row once
    zeros = e.emit("ConstantOfShape", [e.emit("Shape", [values])],
                   value=helper.make_tensor("value", ELEM[n.dtype], [1], [0]))
    flat = e.emit("ScatterND", [zeros, at, values])
    return e.emit("Reshape", [flat, e.emit("Concat", [r_shape, e.ints([out_dim])], axis=0)], out=e.out)
