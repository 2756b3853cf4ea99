"""Norms → ONNX LayerNormalization (opset 17) and RMSNormalization (opset 23), over the last axis.

With contrib_ops, a residual sum that a norm over its last axis reads, h = x + y and rms_norm(h) · γ
or layer_norm(h) · γ + β, is one com.microsoft SkipSimplifiedLayerNormalization or
SkipLayerNormalization, which gives both (genai's Llama layers are made of them): the Add is lowered
as the op, and the norm takes its first result.
"""

from __future__ import annotations

from pseudoformer.backends.onnx.emitter import Emitter
from pseudoformer.backends.onnx.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op


@lowers(Op.LAYER_NORM)
def _layer_norm(e: Emitter, n: Node) -> str:
    fused = e.shared.get(("skip norm", id(n)))
    if fused is not None:
        return fused
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


_SKIP = {Op.RMS_NORM: "SkipSimplifiedLayerNormalization", Op.LAYER_NORM: "SkipLayerNormalization"}


def _weight(e: Emitter, w: Node) -> str | None:
    """A norm's γ or β as a value already there when the sum is lowered, else None."""
    if w.op is Op.PARAM:
        return str(w.attrs["name"])
    if w.op is Op.CONST or id(w) in e.vals:
        return e.value(w)
    return None


def skip_norm(e: Emitter, add: Node) -> str | None:
    """The residual sum `add` as a Skip…Normalization with the first norm over the last axis that reads
    it, when both operands have the sum's own shape (the op does not broadcast); else None."""
    a, b = add.src
    bias: Node | None = None
    for inner, vector in ((a, b), (b, a)):  # (x + y) + b, a bias after the residual (GPT-2's MLP): the op's bias
        if (vector.type.rank == 1 and inner.op is Op.ADD and inner.type.shape == add.type.shape
                and e.consumers.of(inner) == [add]):
            (a, b), bias = inner.src, vector
            break
    if not (a.type.shape == b.type.shape == add.type.shape and add.type.rank in (2, 3) and add.dtype.is_float):
        return None
    last = add.type.rank - 1
    norm = next((u for u in e.consumers.of(add) if u.op in _SKIP and u.src[0] is add
                 and u.attrs["axis"] % u.type.rank == last and all(w.type.rank == 1 for w in u.src[1:])
                 and (u.op is Op.LAYER_NORM or _takes_rms(u, e.opset))), None)
    weights = [_weight(e, w) for w in (*norm.src[1:], *([bias] if bias else []))] if norm is not None else [None]
    if norm is None or None in weights:
        return None  # γ or β computed after the sum: the norm keeps its own op
    normed = f"{e.out}.normed"
    e.emit_multi(_SKIP[norm.op], [e.value(a), e.value(b), *weights],  # type: ignore[list-item]
                 [normed, "", "", e.out], domain="com.microsoft", epsilon=float(norm.attrs["eps"]))
    e.shared[("skip norm", id(norm))] = normed
    return e.out
