"""Ops that are one kernel of onnxruntime's com.microsoft domain, made by the onnx-contrib pipeline
(passes/rules/skip_norm.py, group_query_attention.py) and lowered one-to-one by the ONNX backend.

    SKIP_RMS_NORM(x, y, γ[, b]; eps)       = (rms_norm(h, γ), h)          h = x + y [+ b]
    SKIP_LAYER_NORM(x, y, γ, β[, b]; eps)  = (layer_norm(h, γ, β), h)     over the last axis

the residual sum and the norm that reads it (SkipSimplifiedLayerNormalization, SkipLayerNormalization);
x and y have one shape, rank 2 or 3, and γ, β, b are vectors over the last axis.

    GROUP_QUERY_ATTENTION(q, k, v | qkv, [past_k, past_v], [cos, sin], [mask];
                          q_heads, kv_heads, scale, window, packed, cached, rotary, last, lengths, softmax_fp32)
      = attention(rot(q), rot(k), v [, past]; causal, packed heads)        then row −1 only if `last`

causal attention in the packed form (ATTENTION's q_heads/kv_heads, see attention.py): with `packed`,
one operand [b, s, (H_q + 2·H_kv)·d] holds q, k and v side by side; with `cached`, the past keys and
values [b, H_kv, p, d] come next and the result is (Y, present_k, present_v) as CACHED_ATTENTION's;
with `rotary`, q and k are first rotated per head by tables cos, sin [s, d/2] of the new positions
(ROTARY's rotate-half); with `last`, only the last query position of Y is kept. q has s rows, or one
(the last position alone, bottom-right aligned as in ATTENTION). softmax_fp32 is ATTENTION's (a float16
attention's softmax in float32), carried so that the reference computes what the float16 pass asked of the
attention the op replaced; the kernel has no such switch. Each decomposes into the ops it fuses, but for
`lengths`.

With `lengths` (and `cached`: onnxruntime-genai's step, passes/rules/group_query_attention_lengths.py)
the last operand is an attention mask [b, T] (T = past + s) of which only each row's count n_b = Σ mask_b
is read, as the kernel reads seqlens_k = n_b − 1 and T: the cache is *compact*, row b's keys are its first
n_b − s past rows then its s new ones. A first prompt (s = T) has no past: row b attends causally over
its new positions 0 … s−1 (rows past n_b are padding, their result unspecified: the kernel leaves them
undefined), and present holds all s. Otherwise row b's query j attends to keys 0 … n_b − s + j, and
present row b is those n_b keys then zeros up to T. The rotation's tables are [N, d/2], one row per
position (N ≥ every position), and the positions are j (a first prompt) or n_b − s + j. With a mask of
ones (no padding), this is `cached` attention rotated at positions past … past + s − 1; with padding it
is the kernel's own layout, which genai feeds back as the next step's past: it has no decomposition into
standard ops (the kernel's undefined rows and its run-time choice of a first prompt have none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from pseudoformer.ir.ops import attention, norms
from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import Attr, ExampleMaker, IRTypeError, NodeMaker, OpDef, register
from pseudoformer.ir.ops.rotary import rotate
from pseudoformer.ir.types import DType, TensorType, TupleType

# ---- skip norms


def _skip_type() -> Any:
    def infer(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TupleType:
        x, y, vectors = src[0], src[1], src[2:]
        if x != y or x.rank not in (2, 3) or not x.dtype.is_float:
            raise IRTypeError(f"a skip norm adds two float tensors of one shape of rank 2 or 3, got {x} and {y}")
        if any(v.shape != (x.shape[-1],) or v.dtype != x.dtype for v in vectors):
            raise IRTypeError(f"a skip norm of {x} needs vectors of [{x.shape[-1]}], got "
                              f"{', '.join(str(v) for v in vectors)}")
        return TupleType((x, x))
    return infer


def _skip_impl(norm: Any, weights: int) -> Any:
    def impl(n: Any, a: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        h = a[0] + a[1]
        if len(a) > 2 + weights:
            h = h + a[2 + weights]
        inner = SimpleNamespace(attrs={"axis": h.ndim - 1, "eps": n.attrs["eps"]})
        return norm(inner, [h, *a[2:2 + weights]]), h
    return impl


def _skip_formula(norm: Op, weights: int) -> Any:
    def formula(n: Any, make: NodeMaker) -> tuple[Any, Any]:
        h = make(Op.ADD, n.src[0], n.src[1])
        if len(n.src) > 2 + weights:
            h = make(Op.ADD, h, n.src[2 + weights])
        return make(norm, h, *n.src[2:2 + weights], axis=h.type.rank - 1, eps=n.attrs["eps"]), h
    return formula


def _skip_example(op: Op, weights: int) -> Any:
    """Both results, without and with the bias."""
    def example(make: ExampleMaker) -> list[Any]:
        x, y = (make.input(n, DType.float32, "batch", "seq", 4) for n in ("x", "y"))
        vectors = [make.param(v, DType.float32, 4) for v in ("g", "b")[:weights]]
        bias = make.param("bias", DType.float32, 4)
        fused = [make(op, x, y, *vectors, eps=1e-5), make(op, x, y, *vectors, bias, eps=1e-6)]
        return [make(Op.GET, f, index=i) for f in fused for i in (0, 1)]
    return example


# ---- grouped-query attention

GQA_ATTRS = (Attr("scale", "float"), Attr("q_heads", "int"), Attr("kv_heads", "int"), Attr("window", "int", 0),
             Attr("packed", "bool", False), Attr("cached", "bool", False), Attr("rotary", "bool", False),
             Attr("last", "bool", False), Attr("softcap", "float", 0.0), Attr("lengths", "bool", False),
             Attr("softmax_fp32", "bool", False))


def gqa_operands(src: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """A GROUP_QUERY_ATTENTION's operands as ([q, k, v] or [qkv], past keys and values, cos and sin tables);
    with `lengths`, the mask is the last operand (gqa_mask)."""
    n_qkv = 1 if attrs.get("packed") else 3
    n_past = 2 if attrs.get("cached") else 0
    n_tables = 2 if attrs.get("rotary") else 0
    n_mask = 1 if attrs.get("lengths") else 0
    if len(src) != n_qkv + n_past + n_tables + n_mask:
        raise IRTypeError(f"group_query_attention with these flags takes {n_qkv + n_past + n_tables + n_mask} "
                          f"operands, got {len(src)}")
    end = n_qkv + n_past + n_tables
    return list(src[:n_qkv]), list(src[n_qkv:n_qkv + n_past]), list(src[n_qkv + n_past:end])


def gqa_mask(src: Sequence[Any], attrs: Mapping[str, Any]) -> Any | None:
    """The attention mask of a GROUP_QUERY_ATTENTION with `lengths`, else None."""
    return src[-1] if attrs.get("lengths") else None


def _head_size(attrs: Mapping[str, Any], width: Any) -> int:
    heads = int(attrs["q_heads"]) + 2 * int(attrs["kv_heads"])
    if not isinstance(width, int) or width % heads:
        raise IRTypeError(f"a packed q, k, v of width {width} does not hold {heads} heads")
    return width // heads


def _inner(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes of the (cached) attention the op computes."""
    return {"scale": attrs["scale"], "causal": True, "q_heads": attrs["q_heads"], "kv_heads": attrs["kv_heads"],
            "window": attrs.get("window", 0), "softcap": attrs.get("softcap", 0.0),
            "softmax_fp32": attrs.get("softmax_fp32", False)}


def _gqa_type(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType | TupleType:
    qkv, past, tables = gqa_operands(src, attrs)
    hq, hkv = int(attrs["q_heads"]), int(attrs["kv_heads"])
    if len(qkv) == 1:
        (t,) = qkv
        if t.rank != 3:
            raise IRTypeError(f"a packed q, k, v must be [batch, positions, width], got {t}")
        d = _head_size(attrs, t.shape[2])
        qkv = [TensorType(t.dtype, (*t.shape[:2], h * d)) for h in (hq, hkv, hkv)]
    q, k, _ = qkv
    if q.shape[1] not in (k.shape[1], 1) or (attrs.get("last") and q.shape[1] != k.shape[1]):
        raise IRTypeError(f"group_query_attention's queries {q} are neither every new position of {k} nor the last")
    lengths = bool(attrs.get("lengths"))
    if lengths and not past:
        raise IRTypeError("group_query_attention with lengths attends over a cache: it needs `cached`")
    if tables:
        half = q.shape[2] // hq // 2 if isinstance(q.shape[2], int) else None
        rows = tables[0].shape[0] if lengths else k.shape[1]  # with lengths: a table of every position
        if q.shape[1] != k.shape[1] or any(c != TensorType(q.dtype, (rows, half)) for c in tables):
            raise IRTypeError(f"rotary tables of group_query_attention must be [{rows}, {half}], "
                              f"got {', '.join(str(c) for c in tables)}")
    inner = _inner(attrs)
    if past:
        out: Any = attention._cached_type([*qkv, *past], inner)
        mask = src[-1]
        if lengths and (mask.rank != 2 or mask.dtype is not DType.int64
                        or mask.shape != (k.shape[0], out.types[1].shape[2])):
            raise IRTypeError(f"group_query_attention with lengths takes an int64 mask "
                              f"[{k.shape[0]}, {out.types[1].shape[2]}], got {mask}")
    else:
        out = attention._attention_type(qkv, inner)
    if attrs.get("last"):
        y = out.types[0] if past else out
        y = TensorType(y.dtype, (y.shape[0], 1, y.shape[2]))
        out = TupleType((y, *out.types[1:])) if past else y
    return out


def _split_packed(qkv: np.ndarray, attrs: Mapping[str, Any]) -> list[np.ndarray]:
    d = qkv.shape[2] // (int(attrs["q_heads"]) + 2 * int(attrs["kv_heads"]))
    a, b = int(attrs["q_heads"]) * d, (int(attrs["q_heads"]) + int(attrs["kv_heads"])) * d
    return [qkv[..., :a], qkv[..., a:b], qkv[..., b:]]


def _gqa_impl(n: Any, a: list[np.ndarray]) -> Any:
    qkv, past, tables = gqa_operands(a, n.attrs)
    q, k, v = _split_packed(qkv[0], n.attrs) if len(qkv) == 1 else qkv
    if n.attrs.get("lengths"):
        return _gqa_lengths_impl(n, q, k, v, past, tables, a[-1])
    if tables:
        q = rotate(q, *tables, -1, int(n.attrs["q_heads"]))
        k = rotate(k, *tables, -1, int(n.attrs["kv_heads"]))
    inner = SimpleNamespace(attrs=_inner(n.attrs))
    if past:
        y, keys, values = attention._cached_impl(inner, [q, k, v, *past])
    else:
        y = attention._attention_impl(inner, [q, k, v])
    if n.attrs.get("last"):
        y = y[:, -1:]
    return (y, keys, values) if past else y


def _gqa_lengths_impl(n: Any, q: np.ndarray, k: np.ndarray, v: np.ndarray, past: list[np.ndarray],
                      tables: list[np.ndarray], mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row by row over a compact cache, as the kernel computes it (see the module's docstring)."""
    s, total = k.shape[1], mask.shape[1]
    first = s == total
    counts = (mask != 0).sum(axis=1)
    inner = SimpleNamespace(attrs=_inner(n.attrs))
    ys, keys, values = [], [], []
    for b, count in enumerate(counts):
        start = 0 if first else int(count) - s  # the row's past length, and its first new position
        if not first and not 0 <= start <= past[0].shape[2]:
            raise ValueError(f"row {b} of the attention mask counts {count} positions, which a past of "
                             f"{past[0].shape[2]} and {s} new positions cannot hold")
        rows = [x[b:b + 1] for x in (q, k, v)]
        if tables:
            at = np.arange(start, start + s)
            c, si = tables[0][at], tables[1][at]
            rows[0] = rotate(rows[0], c, si, -1, int(n.attrs["q_heads"]))
            rows[1] = rotate(rows[1], c, si, -1, int(n.attrs["kv_heads"]))
        y, key, value = attention._cached_impl(inner, [*rows, past[0][b:b + 1, :, :start],
                                                        past[1][b:b + 1, :, :start]])
        pad = [(0, 0), (0, 0), (0, total - key.shape[2]), (0, 0)]
        ys.append(y)
        keys.append(np.pad(key, pad))
        values.append(np.pad(value, pad))
    y = np.concatenate(ys)
    if n.attrs.get("last"):
        y = y[:, -1:]
    return y, np.concatenate(keys), np.concatenate(values)


def _gqa_formula(n: Any, make: NodeMaker) -> Any:
    if n.attrs.get("lengths"):
        raise IRTypeError("group_query_attention with lengths reads a compact cache row by row and has no "
                          "decomposition into standard ops (ir/ops/fused_kernels.py); it is made for the "
                          "onnx backend with contrib ops only")
    qkv, past, tables = gqa_operands(n.src, n.attrs)
    hq, hkv = int(n.attrs["q_heads"]), int(n.attrs["kv_heads"])
    if len(qkv) == 1:
        d = _head_size(n.attrs, qkv[0].shape[2])
        bounds = [0, hq * d, (hq + hkv) * d, (hq + 2 * hkv) * d]
        qkv = [make(Op.SLICE, qkv[0], make.const(lo, DType.int64), make.const(hi, DType.int64), axis=2, dim=hi - lo)
               for lo, hi in zip(bounds, bounds[1:], strict=False)]
    q, k, v = qkv
    if tables:
        q = make(Op.ROTARY, q, *tables, axis=2, heads=hq)
        k = make(Op.ROTARY, k, *tables, axis=2, heads=hkv)
    if past:
        r = make(Op.CACHED_ATTENTION, q, k, v, *past, **_inner(n.attrs))
        y, rest = make(Op.GET, r, index=0), (make(Op.GET, r, index=1), make(Op.GET, r, index=2))
    else:
        y, rest = make(Op.ATTENTION, q, k, v, **_inner(n.attrs)), ()
    if n.attrs.get("last"):
        size = make(Op.DIM, y, axis=1)
        y = make(Op.SLICE, y, make(Op.SUB, size, make.const(1, DType.int64)), size, axis=1, dim=1)
    return (y, *rest) if past else y


def _gqa_example(make: ExampleMaker) -> list[Any]:
    """2 query heads of 16 over 1 key/value head: packed q, k, v rotated inside; the last position of it;
    soft-capped scores; one new position's q, k, v apart over a cache, in a window of 2, all three results (the kernel takes
    a past only with one new position, or a batch of one); one query over every key."""
    f32, i64 = DType.float32, DType.int64
    qkv, angles = make.input("qkv", f32, "batch", "seq", 64), make.input("angles", f32, "seq", 8)
    tables = (make(Op.COS, angles), make(Op.SIN, angles))
    heads = {"scale": 0.25, "q_heads": 2, "kv_heads": 1}

    def cols(t: Any, lo: int, hi: int) -> Any:
        return make(Op.SLICE, t, make.const(lo, i64), make.const(hi, i64), axis=2, dim=hi - lo)

    def rows(t: Any, n: int) -> Any:
        return make(Op.SLICE, t, make.const(0, i64), make.const(n, i64), axis=1, dim=n)

    new, past = rows(qkv, 1), make.input("past", f32, "batch", 1, "past", 16)
    cached = make(Op.GROUP_QUERY_ATTENTION, cols(new, 0, 32), cols(new, 32, 48), cols(new, 48, 64), past, past,
                  **heads, cached=True, window=2)
    return [make(Op.GROUP_QUERY_ATTENTION, qkv, *tables, **heads, packed=True, rotary=True),
            make(Op.GROUP_QUERY_ATTENTION, qkv, **heads, packed=True, last=True),
            make(Op.GROUP_QUERY_ATTENTION, qkv, **heads, packed=True, softcap=0.5),  # Gemma 2's soft-capped scores
            *(make(Op.GET, cached, index=i) for i in range(3)),
            make(Op.GROUP_QUERY_ATTENTION, rows(cols(qkv, 0, 32), 1), cols(qkv, 32, 48), cols(qkv, 48, 64), **heads)]


register(
    OpDef(Op.SKIP_RMS_NORM, "(rms_norm(x + y [+ b]) ⊙ γ, x + y [+ b]) over the last axis", (3, 4), _skip_type(),
          _skip_impl(norms._rms_norm, 1), attrs=(Attr("eps", "float"),), decompose=_skip_formula(Op.RMS_NORM, 1),
          example=_skip_example(Op.SKIP_RMS_NORM, 1)),
    OpDef(Op.SKIP_LAYER_NORM, "(layer_norm(x + y [+ b]) ⊙ γ + β, x + y [+ b]) over the last axis", (4, 5),
          _skip_type(), _skip_impl(norms._layer_norm, 2), attrs=(Attr("eps", "float"),),
          decompose=_skip_formula(Op.LAYER_NORM, 2), example=_skip_example(Op.SKIP_LAYER_NORM, 2)),
    OpDef(Op.GROUP_QUERY_ATTENTION, "causal packed-head attention of (rotated) q, k, v [over a cache]", (1, 8),
          _gqa_type, _gqa_impl, attrs=GQA_ATTRS, decompose=_gqa_formula, check=attention._check,
          example=_gqa_example),
)
