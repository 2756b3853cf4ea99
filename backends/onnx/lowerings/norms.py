"""Norms → ONNX LayerNormalization (opset 17) and RMSNormalization (opset 23), over the last axis.

skip_rms_norm and skip_layer_norm (a residual sum and its norm, made by passes/rules/skip_norm.py with
contrib ops) → com.microsoft SkipSimplifiedLayerNormalization and SkipLayerNormalization, which give both.
"""

from __future__ import annotations

from pseudoformer.backends.onnx.emitter import Emitter
from pseudoformer.backends.onnx.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op


@lowers(Op.LAYER_NORM)
def _layer_norm(e: Emitter, n: Node) -> str:
    x, g, b = n.src
    rank = x.type.rank
    axis = n.attrs["axis"] % rank
    xv = e.value(x)
    # LayerNormalization normalises the trailing axes: move ours last and back if it is not.
    perm = [i for i in range(rank) if i != axis] + [axis]
    if axis != rank - 1:
        xv = e.emit("Transpose", [xv], perm=perm)
    y = e.emit("LayerNormalization", [xv, e.value(g), e.value(b)], out=None if axis != rank - 1 else e.out,
               axis=-1, epsilon=float(n.attrs["eps"]))
    if axis != rank - 1:
        y = e.emit("Transpose", [y], out=e.out, perm=[perm.index(i) for i in range(rank)])
    return y


def _takes_rms(n: Node, opset: int) -> bool:
    return opset >= 23 and n.attrs["axis"] % n.type.rank == n.type.rank - 1


# Before opset 23, or over another axis than the last, the backend lowers the RMS norm's formula.
@lowers(Op.RMS_NORM, when=_takes_rms)
def _rms_norm(e: Emitter, n: Node) -> str:
    x, g = n.src
    return e.emit("RMSNormalization", [e.value(x), e.value(g)], out=e.out, axis=-1, epsilon=float(n.attrs["eps"]))


_SKIP = {Op.SKIP_RMS_NORM: "SkipSimplifiedLayerNormalization", Op.SKIP_LAYER_NORM: "SkipLayerNormalization"}


@lowers(*_SKIP)
def _skip_norm(e: Emitter, n: Node) -> tuple[str, str]:
    normed, total = e.result_names(n, 2)
    # The kernel's outputs: the norm, its mean and inverse deviation (unused), the sum
    e.emit_multi(_SKIP[n.op], [e.value(s) for s in n.src], [normed, "", "", total], domain="com.microsoft",
                 epsilon=float(n.attrs["eps"]))
    return normed, total
