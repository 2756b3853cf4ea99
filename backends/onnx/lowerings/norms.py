"""Norms → ONNX LayerNormalization (opset 17) and RMSNormalization (opset 23), over the last axis.

With contrib_ops, a residual sum that an RMS norm reads, h = x + y and rms_norm(h) · γ, is one
com.microsoft SkipSimplifiedLayerNormalization, which gives both (genai's Llama layers are made of
them): the Add is lowered as the op, and the norm takes its first result.
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
    fused = e.shared.get(("skip norm", id(n)))
    if fused is not None:
        return fused
    x, g = n.src
    return e.emit("RMSNormalization", [e.value(x), e.value(g)], out=e.out, axis=-1, epsilon=float(n.attrs["eps"]))


def skip_norm(e: Emitter, add: Node) -> str | None:
    """The residual sum `add` as SkipSimplifiedLayerNormalization with the first RMS norm that reads it,
    when both operands have the sum's own shape (the op does not broadcast); else None."""
    a, b = add.src
    if not (a.type.shape == b.type.shape == add.type.shape and add.type.rank in (2, 3) and add.dtype.is_float):
        return None
    norm = next((u for u in e.consumers.of(add) if u.op is Op.RMS_NORM and u.src[0] is add
                 and _takes_rms(u, e.opset) and u.src[1].type.rank == 1), None)
    gamma = norm.src[1] if norm is not None else None
    if gamma is None or not (gamma.op in (Op.PARAM, Op.CONST) or id(gamma) in e.vals):
        return None  # γ computed after the sum: the norm keeps its own op
    normed = f"{e.out}.normed"
    weight = gamma.attrs["name"] if gamma.op is Op.PARAM else e.value(gamma)
    e.emit_multi("SkipSimplifiedLayerNormalization", [e.value(a), e.value(b), weight],
                 [normed, "", "", e.out], domain="com.microsoft", epsilon=float(norm.attrs["eps"]))
    e.shared[("skip norm", id(norm))] = normed
    return e.out
