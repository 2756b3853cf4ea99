"""Attention → torch.nn.functional.scaled_dot_product_attention, wherever its mask and scale allow.

SDPA's is_causal is top-left aligned; the IR's causal attention is bottom-right aligned (ir/ops/attention.py).
They agree where the queries and keys have one length, and there is_causal is passed when there is no other
mask; otherwise the causal part (and a sliding window's) is a bool mask built from the run-time lengths,
bottom-right aligned, ANDed with the attention's own bool mask or made −∞ in its additive bias. Grouped-query
heads are SDPA's enable_gqa; the packed form [b, s, H·d] is cut into heads and merged back. A float16
attention whose softmax the float16 pass asks for in float32 (softmax_fp32) runs SDPA on float32 copies of
its operands. Soft-capped scores (Gemma 2's) are not what SDPA computes: those attentions lower their formula
(passes/decompose.py). Under torch.compile, float32 on the CPU at short lengths, SDPA is written out as its
softmax and products, which inductor runs faster there than SDPA's CPU kernel (`sdpa`).
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
SHORT = 192  # the most keys for which sdpa() writes attention out under torch.compile


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
        return t.call(sdpa, q, k, v, m, is_causal, scale, grouped).to(TORCH_DTYPE[n.dtype])
    return t.call(sdpa, q, k, v, m, is_causal, scale, grouped)


def sdpa(q: Any, k: Any, v: Any, mask: Any, is_causal: bool, scale: float, grouped: bool) -> Any:
    """F.scaled_dot_product_attention; under torch.compile, float32 on the CPU with at most SHORT keys and
    no mask tensor, its formula, softmax(s·QKᵀ)V (is_causal: top-left aligned, query i sees keys j ≤ i).

    Why: SDPA's CPU kernel (flash attention, in blocks sized for long sequences) is slower there than the
    batched products and the softmax inductor fuses. A GPT-2 small layer's [8, 12, 128, 64], forward and
    backward: 20.2 ms by the kernel, 14.9 ms written out; at [4, 12, 256, 64] the two are even (27.0, 27.7)
    and at 1024 keys the kernel is twice as fast (torch.compile, "Intel(R) Xeon(R) Processor", 2 threads,
    2026-11-28). Eager torch runs the kernel: its softmax and products unfused are slower (21.6 ms). Only
    where Dynamo traces for torch.compile (torch.export's graphs keep the one op); a graph of symbolic lengths
    guards on keys ≤ SHORT, and Dynamo compiles another for longer ones. Without a mask no row is all
    masked (the kernel's zeros against the formula's NaN). What autograd keeps is the probabilities (6 MB a
    layer at that size), where the kernel keeps its output and log-sum-exp."""
    keys = k.shape[-2]
    # the length last: under torch.export a comparison of a symbolic length would be a guard on it
    if (mask is None and not grouped and q.dtype == torch.float32 and q.device.type == "cpu"
            and torch.compiler.is_compiling() and not torch.compiler.is_exporting() and keys <= SHORT):
        s = torch.matmul(q, k.transpose(-2, -1)) * scale
        if is_causal:
            rows = torch.arange(s.shape[-2], device=s.device).unsqueeze(-1)
            s = s.masked_fill(torch.arange(keys, device=s.device) > rows, float("-inf"))
        return torch.matmul(torch.softmax(s, -1), v)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale,
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
