"""Attention → ONNX Attention (opset 23), 4-D or in its 3-D packed form, with past/present keys and values.

ONNX's is_causal is top-left aligned without a past input and bottom-right aligned with one; the IR's
causal attention is bottom-right aligned (ir/ops/attention.py). So a causal attention without a
cache whose queries are neither one position nor all of the keys' is not taken here: the backend
lowers its formula (passes/decompose.py). One query, bottom-right aligned, sees every key, so it
needs no mask at all. ONNX's Attention has no sliding window: a windowed attention gets its mask built
from the run-time sizes (the causal part folded into it), ANDed with the attention's own.
With contrib ops, the attention onnxruntime's GroupQueryAttention computes exactly is a
group_query_attention by then (passes/rules/group_query_attention.py; group_query_attention.py here).
"""

from __future__ import annotations

from onnx import TensorProto

from pseudoformer.backends.onnx.emitter import Emitter
from pseudoformer.backends.onnx.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op


def _takes(n: Node, opset: int) -> bool:
    if opset < 23:
        return False
    packed = bool(n.attrs.get("q_heads", 0))
    if not packed and n.src[0].type.rank not in (3, 4):
        return False
    if n.op is Op.CACHED_ATTENTION:
        return True  # with past_key given, ONNX aligns is_causal bottom-right, as the IR does
    axis = 1 if packed else -2
    sq, sk = n.src[0].shape[axis], n.src[1].shape[axis]
    # a window's mask is built here, bottom-right aligned, and takes the causal part with it
    return not (n.attrs["causal"] and not n.attrs.get("window", 0) and sq != 1 and sq != sk)


def _attrs(n: Node) -> dict:
    packed = bool(n.attrs.get("q_heads", 0))
    sq = n.src[0].shape[1 if packed else -2]
    causal = bool(n.attrs["causal"]) and sq != 1 and not n.attrs.get("window", 0)
    attrs = {"scale": float(n.attrs["scale"]), "is_causal": int(causal)}
    if packed:
        attrs["q_num_heads"], attrs["kv_num_heads"] = int(n.attrs["q_heads"]), int(n.attrs["kv_heads"])
    if n.attrs.get("softmax_fp32"):
        attrs["softmax_precision"] = TensorProto.FLOAT  # the softmax is the sensitive part: fp32
    if n.attrs.get("softcap"):
        attrs["softcap"] = float(n.attrs["softcap"])  # c·tanh(scores / c) before the mask, as the IR's
    return attrs


def _mask(e: Emitter, n: Node, mask_node: Node, q: str) -> str:
    """The mask as the Attention op takes it: 4-D like the op's scores, its query axis spelled out
    (ORT does not broadcast it; a padding mask is [batch, 1, 1, s_k])."""
    mask, m = e.value(mask_node), mask_node.type
    q_type = n.src[0].type
    packed = bool(n.attrs.get("q_heads", 0))
    if not packed and q_type.rank == 3 and m.rank == 3:  # [batch, s_q, s_k] of one head → [batch, 1, s_q, s_k]
        mask = e.emit("Unsqueeze", [mask, e.ints([1])])
    if m.shape[-2] != q_type.shape[1 if packed else -2]:
        # q's positions are axis 2 of [b, H, s_q, d], 1 of [b, s_q, H·d] (and of the unsqueezed 3-D q)
        seq_axis = 1 if packed else 2
        shape = e.emit("Concat", [e.ints([1, 1]), e.shape_dim(q, seq_axis), e.ints([1])], axis=0)
        mask = e.emit("Expand", [mask, shape])
    return mask


def _window_mask(e: Emitter, n: Node, q: str, keys: list[str]) -> str:
    """bool [s_q, s_k]: key j is seen by query i iff i' − w < j (≤ i' if causal), i' = i + s_k − s_q.
    `keys` are the values whose positions add up to s_k (the past keys and the new ones, with a cache)."""
    packed = bool(n.attrs.get("q_heads", 0))
    rank = max(n.src[0].type.rank, 4)  # a 3-D head is unsqueezed to the op's 4-D form
    seq_axis = 1 if packed else rank - 2
    key_axes = [2] * (len(keys) - 1) + [1 if packed else rank - 2]
    sizes = [e.emit("Squeeze", [e.shape_dim(k, ax), e.ints([0])]) for k, ax in zip(keys, key_axes, strict=True)]
    n_k = sizes[0] if len(sizes) == 1 else e.emit("Add", sizes)
    n_q = e.emit("Squeeze", [e.shape_dim(q, seq_axis), e.ints([0])])
    rows = e.emit("Unsqueeze", [e.range(n_q), e.ints([1])])
    rows = e.emit("Add", [rows, e.emit("Sub", [n_k, n_q])])
    cols = e.emit("Unsqueeze", [e.range(n_k), e.ints([0])])
    window = e.const(int(n.attrs["window"]), TensorProto.INT64)
    keep = e.emit("Less", [e.emit("Sub", [rows, cols]), window])
    if n.attrs["causal"]:
        keep = e.emit("And", [keep, e.emit("LessOrEqual", [cols, rows])])
    return keep


def _with_window(e: Emitter, n: Node, mask: str | None, q: str, keys: list[str]) -> str | None:
    if not n.attrs.get("window", 0):
        return mask
    keep = _window_mask(e, n, q, keys)
    return keep if mask is None else e.emit("And", [mask, keep])


def _operands(e: Emitter, n: Node, count: int) -> tuple[list[str], bool]:
    """q, k, v (and past keys and values) as the op takes them; whether they were unsqueezed to 4-D."""
    vals = [e.value(s) for s in n.src[:count]]
    packed = bool(n.attrs.get("q_heads", 0))
    if packed:
        for name, s in zip(vals[:3], n.src[:3], strict=True):
            e.annotate(name, s)
        return vals, False
    if n.src[0].type.rank == 3:  # one head: the op's 4-D form is [batch, heads, seq, dim]
        return [e.emit("Unsqueeze", [t, e.ints([1])]) for t in vals], True
    return vals, False


@lowers(Op.ATTENTION, when=_takes)
def _attention(e: Emitter, n: Node) -> str:
    (q, k, v), unsqueezed = _operands(e, n, 3)
    own = _mask(e, n, n.src[3], q) if len(n.src) > 3 else None
    full = _with_window(e, n, own, q, [k])
    mask = [full] if full is not None else []
    out = e.emit("Attention", [q, k, v, *mask], out=None if unsqueezed else e.out, **_attrs(n))
    return e.emit("Squeeze", [out, e.ints([1])], out=e.out) if unsqueezed else out


@lowers(Op.CACHED_ATTENTION, when=_takes)
def _cached_attention(e: Emitter, n: Node) -> tuple[str, ...]:
    outputs = e.result_names(n, 3)
    (q, k, v, pk, pv), _ = _operands(e, n, 5)
    mask = _with_window(e, n, _mask(e, n, n.src[5], q) if len(n.src) > 5 else None, q, [pk, k]) or ""
    e.emit_multi("Attention", [q, k, v, mask, pk, pv], outputs, **_attrs(n))
    return tuple(outputs)
