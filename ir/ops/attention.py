"""Attention, made by the attention fusion (passes/rules/attention.py) from Algorithm 4's masked softmax.

    ATTENTION(q, k, v[, mask]; scale, causal) = softmax(q kᵀ·scale, masked) v   over the last two axes

Batched form (q_heads = 0): q [..., s_q, d], k [..., s_k, d], v [..., s_k, d_v] → [..., s_q, d_v], the
leading axes broadcast; the head axis (third from last) of k and v may divide q's, and then query
head h reads key/value head ⌊h / G⌋, G = q's heads / k's heads (grouped-query attention).
Packed form (q_heads = H_q > 0, kv_heads = H_kv): q [b, s_q, H_q·d], k [b, s_k, H_kv·d],
v [b, s_k, H_kv·d_v] → [b, s_q, H_q·d_v], the heads side by side in the last axis, as ONNX's
Attention takes them in 3-D (passes/packed_heads.py makes this form).

The optional mask broadcasts to the scores [..., s_q, s_k]. A bool mask is True where a query may
attend; a float mask (of q's dtype) is an additive bias, added to the scaled scores before the softmax
(ALiBi's m·(j − i), T5's learned relative bias, or where(keep, bias, −∞) for both at once).
causal: query i sees key j iff j ≤ i + s_k − s_q — the queries are the last s_q of the s_k positions
(bottom-right aligned), so a decode step whose keys include a cache of earlier positions means the
same as the full run. window = w > 0 (a sliding window, Mistral's): query i sees key j only if
i + s_k − s_q − j < w, the w latest positions, aligned the same way. softmax_fp32 (set by the float16
pass) computes the scores' softmax in float32. softcap = c > 0 (Gemma 2's soft-capping) replaces the scaled
scores s by c·tanh(s / c) before the mask and the bias are applied, as ONNX's Attention does.

    CACHED_ATTENTION(q, k, v, past_k, past_v[, mask]) = (ATTENTION(q, [past_k; k], [past_v; v][, mask]),
                                                         present_k, present_v)

is attention that also returns its keys and values with the new positions appended (the KV cache);
passes/cache_fusion.py makes it where a backend's kernel appends in place (ONNX Attention's past/present).
The past and present caches are [..., positions, d] in the batched form and [b, H_kv, positions, d]
in the packed one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.movement import _concat
from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.reductions import softmax
from pseudoformer.ir.ops.registry import Attr, ExampleMaker, IRTypeError, NodeMaker, OpDef, register
from pseudoformer.ir.types import Dim, DType, TensorType, TupleType, broadcast_shapes

ATTRS = (Attr("scale", "float"), Attr("causal", "bool"), Attr("q_heads", "int", 0), Attr("kv_heads", "int", 0),
         Attr("softmax_fp32", "bool", False), Attr("window", "int", 0), Attr("softcap", "float", 0.0))


def _heads(a: Mapping[str, Any]) -> tuple[int, int]:
    return int(a.get("q_heads", 0)), int(a.get("kv_heads", 0))


def _split(width: Dim, heads: int, what: str) -> int:
    if not isinstance(width, int) or width % heads:
        raise IRTypeError(f"attention's {what} width {width} is not a multiple of its {heads} heads")
    return width // heads


def _packed_type(q: TensorType, k: TensorType, v: TensorType, hq: int, hkv: int) -> tuple[TensorType, tuple]:
    if (q.rank, k.rank, v.rank) != (3, 3, 3) or hkv < 1 or hq % hkv:
        raise IRTypeError(f"packed attention needs rank-3 q, k, v and q_heads a multiple of kv_heads, got "
                          f"q {q}, k {k}, v {v}, q_heads={hq}, kv_heads={hkv}")
    d = _split(q.shape[2], hq, "query")
    if k.shape[2] != hkv * d or k.shape[1] != v.shape[1] or broadcast_shapes(q.shape[:1], k.shape[:1]) is None:
        raise IRTypeError(f"attention of q {q}, k {k}, v {v} with {hq}/{hkv} heads")
    dv = _split(v.shape[2], hkv, "value")
    scores = (q.shape[0], hq, q.shape[1], k.shape[1])
    return TensorType(q.dtype, (q.shape[0], q.shape[1], hq * dv)), scores


def _batched_type(q: TensorType, k: TensorType, v: TensorType) -> tuple[TensorType, tuple]:
    if min(q.rank, k.rank, v.rank) < 2 or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise IRTypeError(f"attention of q {q}, k {k}, v {v}")
    qlead, klead = q.shape[:-2], k.shape[:-2]
    if _grouped(q, k):
        qlead, klead = qlead[:-1], klead[:-1]
    lead = broadcast_shapes(qlead, klead)
    if lead is None:
        raise IRTypeError(f"attention batch dims do not broadcast: {q}, {k}")
    if _grouped(q, k):
        lead = (*lead, q.shape[-3])
    scores = (*lead, q.shape[-2], k.shape[-2])
    return TensorType(q.dtype, (*lead, q.shape[-2], v.shape[-1])), scores


def _grouped(q: TensorType, k: TensorType) -> bool:
    """Whether k has fewer heads than q, each shared by a group of query heads."""
    if q.rank < 3 or k.rank < 3:
        return False
    hq, hk = q.shape[-3], k.shape[-3]
    return isinstance(hq, int) and isinstance(hk, int) and hk not in (1, hq) and hq % hk == 0


def is_bias(mask: TensorType) -> bool:
    """Whether an attention mask is an additive float bias rather than a bool keep-mask."""
    return mask.dtype is not DType.bool


def _check_mask(mask: TensorType, q: TensorType, scores: tuple) -> None:
    # The mask broadcasts to the scores: [s_q, s_k] for every example and head, per head ([H, s_q, s_k],
    # ALiBi's slopes), or per example ([batch, 1, 1, s_k], a padding mask over the keys).
    if mask.dtype not in (DType.bool, q.dtype) or mask.rank > len(scores) \
            or broadcast_shapes(mask.shape, scores) != scores:
        raise IRTypeError(f"attention mask must be bool or {q.dtype.value} and broadcast to "
                          f"[{', '.join(map(str, scores))}], got {mask}")


def _attention_type(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    if len(src) not in (3, 4):
        raise IRTypeError(f"attention takes 3 or 4 operands, got {len(src)}")
    hq, hkv = _heads(attrs)
    out, scores = _packed_type(*src[:3], hq, hkv) if hq else _batched_type(*src[:3])
    if len(src) == 4:
        _check_mask(src[3], src[0], scores)
    return out


def _present(past: TensorType, new: TensorType, heads: int) -> TensorType:
    if heads:  # the new positions' [b, s, H·d] as the cache's [b, H, s, d]
        new = TensorType(new.dtype, (new.shape[0], heads, new.shape[1], _split(new.shape[2], heads, "cache")))
    if past.rank != new.rank:
        raise IRTypeError(f"a cache {past} cannot hold keys {new}")
    return _concat([past, new], {"axis": past.rank - 2})


def _cached_type(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TupleType:
    q, k, v, pk, pv = src[:5]
    hq, hkv = _heads(attrs)
    keys, values = _present(pk, k, hkv), _present(pv, v, hkv)
    if hq:  # attention over every position, in the packed form
        merged = [TensorType(t.dtype, (t.shape[0], t.shape[2], hkv * t.shape[3])) for t in (keys, values)]
        out, scores = _packed_type(q, *merged, hq, hkv)
    else:
        out, scores = _batched_type(q, keys, values)
    if len(src) == 6:
        _check_mask(src[5], q, scores)
    return TupleType((out, keys, values))


# ---- the reference semantics


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, scale: float, causal: bool,
           softmax_fp32: bool = False, window: int = 0, softcap: float = 0.0) -> np.ndarray:
    """Batched attention on arrays, grouped-query where k and v have fewer heads than q."""
    if q.ndim >= 3 and k.shape[-3] not in (1, q.shape[-3]):
        group = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * np.asarray(scale, q.dtype)
    if softmax_fp32:
        s = s.astype(np.float32)
    if softcap:
        s = (np.asarray(softcap, s.dtype) * np.tanh(s / np.asarray(softcap, s.dtype))).astype(s.dtype)
    keep = np.ones(s.shape[-2:], dtype=bool)
    if mask is not None and mask.dtype == np.bool_:
        keep = keep & mask  # a per-example mask broadcasts keep to the scores' shape
    elif mask is not None:
        s = s + mask.astype(s.dtype)  # an additive bias (−∞ where it hides a key)
    sq, sk = s.shape[-2:]
    if causal:  # bottom-right aligned: the queries are the last s_q of the s_k positions
        keep &= np.tril(np.ones((sq, sk), dtype=bool), k=sk - sq)
    if window:  # only the `window` latest keys, aligned the same way
        keep &= ~np.tril(np.ones((sq, sk), dtype=bool), k=sk - sq - window)
    p = softmax(np.where(keep, s, np.asarray(-np.inf, s.dtype)), -1).astype(q.dtype)
    return np.matmul(p, v).astype(q.dtype)


def _to_heads(x: np.ndarray, heads: int) -> np.ndarray:
    b, s, w = x.shape
    return x.reshape(b, s, heads, w // heads).transpose(0, 2, 1, 3)


def _from_heads(y: np.ndarray) -> np.ndarray:
    b, h, s, d = y.shape
    return y.transpose(0, 2, 1, 3).reshape(b, s, h * d)


def _attention_impl(n: Any, a: list[np.ndarray]) -> np.ndarray:
    hq, hkv = _heads(n.attrs)
    q, k, v = a[:3]
    mask = a[3] if len(a) > 3 else None
    args = (n.attrs["scale"], n.attrs["causal"], n.attrs.get("softmax_fp32", False), n.attrs.get("window", 0),
            n.attrs.get("softcap", 0.0))
    if not hq:
        return attend(q, k, v, mask, *args)
    return _from_heads(attend(_to_heads(q, hq), _to_heads(k, hkv), _to_heads(v, hkv), mask, *args))


def _cached_impl(n: Any, a: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    hq, hkv = _heads(n.attrs)
    q, k, v, pk, pv = a[:5]
    mask = a[5] if len(a) > 5 else None
    if hkv:
        k, v = _to_heads(k, hkv), _to_heads(v, hkv)
    keys, values = np.concatenate([pk, k], axis=-2), np.concatenate([pv, v], axis=-2)
    args = (n.attrs["scale"], n.attrs["causal"], n.attrs.get("softmax_fp32", False), n.attrs.get("window", 0),
            n.attrs.get("softcap", 0.0))
    y = _from_heads(attend(_to_heads(q, hq), keys, values, mask, *args)) if hq else \
        attend(q, keys, values, mask, *args)
    return y, keys, values


# ---- decompositions: attention by parts, for backends without an attention kernel


def _swap_last(rank: int) -> list[int]:
    return [*range(rank - 2), rank - 1, rank - 2]


def _split_heads(make: NodeMaker, x: Any, heads: int) -> Any:
    """[b, s, H·d] → [b, H, s, d]."""
    b, s, w = x.shape
    return make(Op.TRANSPOSE, make(Op.RESHAPE, x, shape=[b, s, heads, w // heads]), perm=[0, 2, 1, 3])


def _merge_heads(make: NodeMaker, y: Any) -> Any:
    """[b, H, s, d] → [b, s, H·d]."""
    t = make(Op.TRANSPOSE, y, perm=[0, 2, 1, 3])
    b, s, h, d = t.shape
    return make(Op.RESHAPE, t, shape=[b, s, h * d])


def by_parts(make: NodeMaker, q: Any, k: Any, v: Any, mask: Any | None, attrs: Mapping[str, Any]) -> Any:
    """softmax(q kᵀ·scale, masked) v with matmul, where and softmax, for batched q, k, v."""
    rank = q.type.rank
    grouped = _grouped(q.type, k.type)
    if grouped:  # q [.., H_q, s, d] as [.., H_kv, G, s, d]; k, v [.., H_kv, 1, s, d]: the products broadcast
        *lead, hq, sq, d = q.shape
        hk = k.shape[-3]
        q = make(Op.RESHAPE, q, shape=[*lead, hk, hq // hk, sq, d])
        k, v = (make(Op.UNSQUEEZE, t, axes=[rank - 2]) for t in (k, v))
        if mask is not None and mask.type.rank >= 3 and mask.shape[-3] == hq:  # per head: [.., H_kv, G, ..]
            *mlead, _, mq, mk = mask.shape
            mask = make(Op.RESHAPE, mask, shape=[*mlead, hk, hq // hk, mq, mk])
        elif mask is not None and mask.type.rank >= 3:
            mask = make(Op.UNSQUEEZE, mask, axes=[mask.type.rank - 2])
        rank += 1
    s = make(Op.MATMUL, q, make(Op.TRANSPOSE, k, perm=_swap_last(rank)))
    s = make(Op.MUL, s, make.const(float(attrs["scale"]), s.dtype))
    dtype = s.dtype
    if attrs.get("softmax_fp32") and dtype is not DType.float32:
        s = make(Op.CAST, s, dtype=DType.float32)
    if attrs.get("softcap"):
        c = make.const(float(attrs["softcap"]), s.dtype)
        s = make(Op.MUL, make(Op.TANH, make(Op.DIV, s, c)), c)
    if mask is not None and is_bias(mask.type):
        bias = mask if mask.dtype is s.dtype else make(Op.CAST, mask, dtype=s.dtype)
        s, mask = make(Op.ADD, s, bias), None
    keep = mask
    for part in position_masks(make, q, k, rank, attrs):
        keep = part if keep is None else make(Op.AND, keep, part)
    if keep is not None:
        s = make(Op.WHERE, keep, s, make.const(-math.inf, s.dtype))
    p = make(Op.SOFTMAX, s, axis=-1)
    if p.dtype is not dtype:
        p = make(Op.CAST, p, dtype=dtype)
    y = make(Op.MATMUL, p, v)
    if grouped:
        *lead, hk, g, sq, dv = y.shape
        y = make(Op.RESHAPE, y, shape=[*lead, hk * g, sq, dv])
    return y


def position_masks(make: NodeMaker, q: Any, k: Any, rank: int, attrs: Mapping[str, Any]) -> list[Any]:
    """The bool [s_q, s_k] masks that `causal` and `window` stand for, built from the run-time sizes."""
    window = int(attrs.get("window", 0))
    if not attrs["causal"] and not window:
        return []
    # bottom-right aligned: query i is key position i + s_k − s_q
    n_q, n_k = make(Op.DIM, q, axis=rank - 2), make(Op.DIM, k, axis=rank - 2)
    first = make(Op.SUB, n_k, n_q)
    rows = make(Op.UNSQUEEZE, make(Op.ADD, make(Op.ARANGE, n_q, dim=q.shape[-2]), first), axes=[1])
    cols = make(Op.UNSQUEEZE, make(Op.ARANGE, n_k, dim=k.shape[-2]), axes=[0])
    masks = [make(Op.GE, rows, cols)] if attrs["causal"] else []
    if window:
        masks.append(make(Op.LT, make(Op.SUB, rows, cols), make.const(window, DType.int64)))
    return masks


def _check(n: Any) -> list[str]:
    w, c = n.attrs.get("window", 0), n.attrs.get("softcap", 0.0)
    return [f"{n.op.value} window={w} must be a number of positions ≥ 0"] * (w < 0) + \
        [f"{n.op.value} softcap={c} must be a finite number ≥ 0 (0: none)"] * (not 0 <= c < math.inf)


def _attention_formula(n: Any, make: NodeMaker) -> Any:
    hq, hkv = _heads(n.attrs)
    q, k, v = n.src[:3]
    mask = n.src[3] if len(n.src) > 3 else None
    if not hq:
        return by_parts(make, q, k, v, mask, n.attrs)
    heads = (_split_heads(make, q, hq), _split_heads(make, k, hkv), _split_heads(make, v, hkv))
    return _merge_heads(make, by_parts(make, *heads, mask, n.attrs))


def _cached_formula(n: Any, make: NodeMaker) -> tuple[Any, Any, Any]:
    hq, hkv = _heads(n.attrs)
    q, k, v, pk, pv = n.src[:5]
    mask = n.src[5] if len(n.src) > 5 else None
    if hkv:
        k, v = _split_heads(make, k, hkv), _split_heads(make, v, hkv)
    axis = pk.type.rank - 2
    keys, values = make(Op.CONCAT, pk, k, axis=axis), make(Op.CONCAT, pv, v, axis=axis)
    if hq:
        y = _merge_heads(make, by_parts(make, _split_heads(make, q, hq), keys, values, mask, n.attrs))
    else:
        y = by_parts(make, q, keys, values, mask, n.attrs)
    return y, keys, values


def _positions(n: Any, dim: str) -> tuple[int, ...] | str:
    # Queries are independent given the keys and values, which keep every position.
    if len(n.src) == 3 and n.src[0].shape[-2] == dim:
        return (0,)
    return "attention whose mask or keys vary by query position"


def _mask(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    mask = rng.random(shape) < 0.7
    mask[..., 0] = True  # every query attends somewhere, or its softmax is nan by definition
    return mask


def _attention_example(make: ExampleMaker) -> list[Any]:
    """Heads [batch, heads, seq, d]: causal and masked, grouped (4 query heads over 2) and in a sliding window
    of 2; one head [batch, seq, 6] unmasked; heads packed as [batch, seq, H·d] (passes/packed_heads.py),
    2 query heads sharing 1 key/value head; soft-capped, causal and masked."""
    f32 = DType.float32
    q, k, v = (make.input(n, f32, "batch", 2, "seq", d) for n, d in (("q", 4), ("k", 4), ("v", 3)))
    mask = make.input("mask", DType.bool, "seq", "seq", values=_mask)
    q3 = make.input("q3", f32, "batch", "seq", 6)
    k3 = make(Op.SLICE, q3, make.const(0, DType.int64), make.const(3, DType.int64), axis=2, dim=3)
    return [make(Op.ATTENTION, q, k, v, mask, scale=0.5, causal=True),
            make(Op.ATTENTION, make(Op.CONCAT, q, q, axis=1), k, v, scale=0.5, causal=False),
            make(Op.ATTENTION, q, k, v, scale=0.5, causal=True, window=2),
            make(Op.ATTENTION, q3, q3, q3, scale=0.25, causal=False),
            make(Op.ATTENTION, q3, k3, q3, scale=0.5, causal=True, q_heads=2, kv_heads=1),
            # Gemma 2's soft-capped scores (large enough to reach the cap), masked after the cap
            make(Op.ATTENTION, make(Op.MUL, q, make.const(4.0, f32)), k, v, mask, scale=0.5, causal=True,
                 softcap=1.5)]


def _cached_example(make: ExampleMaker) -> list[Any]:
    """Keys and values of earlier positions appended in the op (passes/cache_fusion.py): all three results,
    and the attention within a window of 3."""
    f32 = DType.float32
    q, k, v = (make.input(n, f32, "batch", 2, "seq", d) for n, d in (("q", 4), ("k", 4), ("v", 3)))
    pk, pv = (make.input(n, f32, "batch", 2, "past", d) for n, d in (("past_k", 4), ("past_v", 3)))
    cached = make(Op.CACHED_ATTENTION, q, k, v, pk, pv, scale=0.5, causal=True)
    window = make(Op.CACHED_ATTENTION, q, k, v, pk, pv, scale=0.5, causal=True, window=3)
    return [*(make(Op.GET, cached, index=i) for i in range(3)), make(Op.GET, window, index=0)]


register(
    OpDef(Op.ATTENTION, "softmax(q kᵀ·scale, masked) v", (3, 4), _attention_type, _attention_impl, attrs=ATTRS,
          positions=_positions, layout="attention", decompose=_attention_formula, check=_check,
          example=_attention_example),
    OpDef(Op.CACHED_ATTENTION, "attention over [past; new] keys and values, returning them too", (5, 6),
          _cached_type, _cached_impl, attrs=ATTRS, decompose=_cached_formula, check=_check,
          example=_cached_example),
)
