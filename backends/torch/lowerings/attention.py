"""Attention → torch.nn.functional.scaled_dot_product_attention, wherever its mask and scale allow.

SDPA's is_causal is top-left aligned; the IR's causal attention is bottom-right aligned (ir/ops/attention.py).
They agree where the queries and keys have one length, and there is_causal is passed when there is no other
mask; otherwise the causal part (and a sliding window's) is a bool mask built from the run-time lengths,
bottom-right aligned, ANDed with the attention's own bool mask or made −∞ in its additive bias. Grouped-query
heads are SDPA's enable_gqa; the packed form [b, s, H·d] is cut into heads and merged back. A float16
attention whose softmax the float16 pass asks for in float32 (softmax_fp32) runs SDPA on float32 copies of
its operands. Soft-capped scores (Gemma 2's) are not what SDPA computes: those attentions lower their formula
(passes/decompose.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pseudoformer.backends.torch.dtypes import TORCH_DTYPE, torch
from pseudoformer.backends.torch.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op
from pseudoformer.ir.types import DType

if TYPE_CHECKING:
    from pseudoformer.backends.torch.lower import TorchLowering

F = torch.nn.functional


def _takes(n: Node) -> bool:
    if n.attrs.get("softcap", 0.0):
        return False
    q, k = n.src[0].type, n.src[1].type
    if n.attrs.get("q_heads", 0):
        return True
    if q.rank < 3 or k.rank != q.rank:
        return q.rank == k.rank == 2 or (q.rank >= 2 and k.rank == q.rank)
    hq, hk = q.shape[-3], k.shape[-3]
    return hq == hk or (isinstance(hq, int) and isinstance(hk, int) and hq % hk == 0)


def _heads(t: TorchLowering, x: Any, heads: int) -> Any:
    """[b, s, H·d] → [b, H, s, d]."""
    return x.unflatten(-1, (heads, -1)).transpose(1, 2)


def _position_mask(t: TorchLowering, n: Node, sq: Any, sk: Any) -> Any:
    """bool [s_q, s_k]: the causal and window limits, bottom-right aligned."""
    rows = arange_of(t, sq).unsqueeze(1) + (sk - sq)
    cols = arange_of(t, sk).unsqueeze(0)
    keep = None
    if n.attrs["causal"]:
        keep = cols <= rows
    if n.attrs.get("window", 0):
        near = (rows - cols) < int(n.attrs["window"])
        keep = near if keep is None else keep & near
    return keep


def arange_of(t: TorchLowering, size: Any) -> Any:
    if isinstance(size, int):
        return t.constant(torch.arange(size))
    return t.call(torch.arange, size, dtype=torch.int64, device=t.device)


def attend(t: TorchLowering, n: Node, q: Any, k: Any, v: Any, mask: Node | None, sq: Any, sk: Any) -> Any:
    """SDPA over [..., s, d] operands (k and v of s_k positions, maybe fewer heads)."""
    scale = float(n.attrs["scale"])
    m = t.tensor(mask) if mask is not None else None
    causal = bool(n.attrs["causal"])
    window = int(n.attrs.get("window", 0))
    is_causal = False
    if causal and not window and m is None and _same(sq, sk):
        is_causal = True  # top-left is bottom-right when the lengths are one
    elif causal or window:
        keep = _position_mask(t, n, sq, sk)
        if m is None:
            m = keep
        elif mask is not None and mask.dtype is DType.bool:
            m = m & keep
        else:
            m = m.masked_fill(~keep, float("-inf"))
    grouped = n.src[0].type.rank >= 3 and n.src[1].type.rank >= 3 and _grouped(n)
    if n.attrs.get("softmax_fp32") and n.dtype is not DType.float32:
        q, k, v = q.float(), k.float(), v.float()
        m = m.float() if m is not None and m.dtype.is_floating_point else m
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=is_causal, scale=scale, enable_gqa=grouped)
        return y.to(TORCH_DTYPE[n.dtype])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=is_causal, scale=scale,
                                          enable_gqa=grouped)


def _grouped(n: Node) -> bool:
    hq = n.attrs.get("q_heads", 0) or n.src[0].type.shape[-3]
    hk = n.attrs.get("kv_heads", 0) or n.src[1].type.shape[-3]
    return hq != hk


def _same(a: Any, b: Any) -> bool:
    return a is b or (isinstance(a, int) and isinstance(b, int) and a == b)


@lowers(Op.ATTENTION, when=_takes)
def _attention(t: TorchLowering, n: Node) -> Any:
    q, k, v = (t.tensor(s) for s in n.src[:3])
    mask = n.src[3] if len(n.src) > 3 else None
    hq = int(n.attrs.get("q_heads", 0))
    if hq:
        hk = int(n.attrs["kv_heads"])
        sq, sk = _seq(t, n.src[0], 1), _seq(t, n.src[1], 1)
        y = attend(t, n, _heads(t, q, hq), _heads(t, k, hk), _heads(t, v, hk), mask, sq, sk)
        return y.transpose(1, 2).flatten(2)
    sq, sk = _seq(t, n.src[0], -2), _seq(t, n.src[1], -2)
    return attend(t, n, q, k, v, mask, sq, sk)


def _seq(t: TorchLowering, x: Node, axis: int) -> Any:
    """A length: the IR's dim name stands for itself, so two operands of one dim compare as the same."""
    d = x.type.shape[axis]
    if isinstance(d, int):
        return d
    key = ("seq", d)
    if key not in t.shared:
        t.shared[key] = t.size(x, axis)
    return t.shared[key]
