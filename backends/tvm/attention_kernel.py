"""Attention on a CPU as one kernel: scores, causal/window limits, softmax and the product with V per query row.

    o[b, h, i] = Σ_j softmax_j(scale · q[b, h, i] · k[b, h/G, j]) · v[b, h/G, j],
                 j over lo(i) ≤ j < hi(i):   hi = min(s_k, i + s_k − s_q + 1) if causal else s_k,
                                             lo = max(0, hi − window) if window else 0

(ir/ops/attention.py's ATTENTION, batched form, rank 4, no mask operand). The decomposition that TVM lowered
before (attention by parts) is six kernels a layer in a decode step: the keys transposed into a copy, the
scores with the mask built from aranges, softmax, the product with V, and the reshapes of grouped-query
heads; ~75 µs a layer on SmolLM2's shape at 129 positions, for 150K multiply-adds. Here one task is one query
row of one head: its keys' scores go into a buffer of s_k floats (the masked ones are never computed, so no
−∞ is formed), then their exponentials, then the weighted sum of V's rows in registers. A grouped query head
h reads key/value head h // G directly: no expanded copy of the cache.

Vectors: the dot product over d runs `lanes` wide (16 on AVX-512 when d allows) and is summed across lanes
per key; the product with V is `lanes` wide over d_v. exp is fastmath.fast_exp_expr (TVM's polynomial).
A call whose multiply-adds are below MIN_PARALLEL_WORK (a decode step up to ~800 positions on SmolLM2's
shape) runs on the calling thread, as parallel_gate.py explains for small kernels; prefill splits its
b·H·s_q rows between the threads.

buffered_attention_func is the same rows over a cache in buffers of a fixed capacity (ir/ops/buffered_attention.py):
it first writes the new keys and values into the buffers at the cache's length, then attends over the buffers'
first length + new positions. The lowering calls it in place (call_tir_inplace): the buffers are the caller's, so
a decode step copies only its new position, not the cache (concat_kernel.py's join copies all of it).
"""

from __future__ import annotations

from typing import Any

from pseudoformer.backends.tvm.fastmath import fast_exp_expr
from pseudoformer.backends.tvm.guard import require_tvm
from pseudoformer.backends.tvm.parallel_gate import MIN_WORK_ATTR

tvm = require_tvm()
from tvm import tirx  # noqa: E402
from tvm.script import tirx as T  # noqa: E402

# multiply-adds (b · H · s_q · s_k · (d + d_v)) below which one thread does the call: ~30 µs of vector work
MIN_PARALLEL_WORK = 1 << 21


def vector_lanes(width: int) -> int:
    """The widest of 16, 8, 4, 2, 1 float32 lanes that divides `width`."""
    return next(lanes for lanes in (16, 8, 4, 2, 1) if width % lanes == 0)


def _row(hq: int, hkv: int, d: int, dv: int, *, scale: float, causal: bool, window: int = 0,
         softcap: float = 0.0) -> Any:
    """The macro row(q, k, v, o, task, s_q, s_k): one query row's attention over keys [0, s_k)."""
    if hq % hkv:
        raise ValueError(f"{hq} query heads do not share {hkv} key heads evenly")
    group = hq // hkv
    ld, lv = vector_lanes(d), vector_lanes(dv)

    def f32(x: float) -> Any:
        return tirx.const(x, "float32")

    def span(start: Any, lanes: int) -> Any:
        return T.ramp(start, 1, lanes) if lanes > 1 else start

    def bcast(x: Any, lanes: int) -> Any:
        return T.broadcast(x, lanes) if lanes > 1 else x

    def vec(lanes: int) -> str:
        return f"float32x{lanes}" if lanes > 1 else "float32"

    def capped(s: Any) -> Any:
        return s if not softcap else f32(softcap) * tirx.tanh(s / f32(softcap))

    def upper(i: Any, s_q: Any, s_k: Any) -> Any:
        return tirx.min(s_k, i + s_k - s_q + 1) if causal else s_k

    def lower(hi: Any) -> Any:
        return tirx.max(tirx.const(0, "int64"), hi - window) if window else tirx.const(0, "int64")

    def lane_sum(acc: Any, lo: int = 0, n: int = ld) -> Any:
        """acc[lo] + … + acc[lo + n − 1] as a tree: independent adds, not a chain."""
        return acc[lo] if n == 1 else lane_sum(acc, lo, n // 2) + lane_sum(acc, lo + n // 2, n - n // 2)

    @T.macro
    def row(q: Any, k: Any, v: Any, o: Any, task: Any, s_q: Any, s_k: Any) -> None:
        """Query row `task` = (b · hq + h) · s_q + i."""
        i = task % s_q
        h = task // s_q % hq
        b = task // (s_q * hq)
        kh = h // group
        hi = upper(i, s_q, s_k)
        lo = lower(hi)
        scores = T.alloc_buffer((s_k,), "float32")
        acc = T.alloc_buffer((ld,), "float32", scope="local")
        out = T.alloc_buffer((dv,), "float32", scope="local")
        top = T.alloc_buffer((1,), "float32", scope="local")
        total = T.alloc_buffer((1,), "float32", scope="local")
        top[0] = T.float32(-3.4e38)
        for j in range(lo, hi):
            acc[span(0, ld)] = bcast(T.float32(0), ld)
            for c in range(d // ld):
                acc[span(0, ld)] = acc[span(0, ld)] + q.vload([b, h, i, c * ld], vec(ld)) * \
                    k.vload([b, kh, j, c * ld], vec(ld))
            scores[j] = capped(lane_sum(acc) * f32(scale))
            top[0] = T.max(top[0], scores[j])
        total[0] = T.float32(0)
        for j in range(lo, hi):
            scores[j] = fast_exp_expr(scores[j] - top[0])
            total[0] = total[0] + scores[j]
        for c in range(dv // lv):
            out[span(c * lv, lv)] = bcast(T.float32(0), lv)
        for j in range(lo, hi):
            for c in range(dv // lv):
                out[span(c * lv, lv)] = out[span(c * lv, lv)] + bcast(scores[j], lv) * \
                    v.vload([b, kh, j, c * lv], vec(lv))
        for c in range(dv // lv):
            o[b, h, i, span(c * lv, lv)] = out[span(c * lv, lv)] / bcast(total[0], lv)

    return row


def attention_func(hq: int, hkv: int, d: int, dv: int, *, scale: float, causal: bool, window: int = 0,
                   softcap: float = 0.0) -> Any:
    """The PrimFunc main(q [b, hq, s_q, d], k [b, hkv, s_k, d], v [b, hkv, s_k, dv], o [b, hq, s_q, dv]),
    float32, b, s_q and s_k symbolic; hq a multiple of hkv."""
    row = _row(hq, hkv, d, dv, scale=scale, causal=causal, window=window, softcap=softcap)
    gate = {MIN_WORK_ATTR: 0}  # decided here, from the call's sizes

    @T.prim_func(s_tir=True)
    def main(q_h: T.handle, k_h: T.handle, v_h: T.handle, o_h: T.handle):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
        n_b, s_q, s_k = T.int64(), T.int64(), T.int64()
        q = T.match_buffer(q_h, (n_b, hq, s_q, d), "float32")
        k = T.match_buffer(k_h, (n_b, hkv, s_k, d), "float32")
        v = T.match_buffer(v_h, (n_b, hkv, s_k, dv), "float32")
        o = T.match_buffer(o_h, (n_b, hq, s_q, dv), "float32")
        if n_b * hq * s_q * s_k * (d + dv) < MIN_PARALLEL_WORK:
            for task in range(n_b * hq * s_q):
                row(q, k, v, o, task, s_q, s_k)
        else:
            for task in T.parallel(n_b * hq * s_q, annotations=gate):
                row(q, k, v, o, task, s_q, s_k)

    return main


def buffered_attention_func(hq: int, hkv: int, d: int, dv: int, *, scale: float, causal: bool, window: int = 0,
                            softcap: float = 0.0) -> Any:
    """The PrimFunc main(q [b, hq, s_q, d], k [b, hkv, s, d], v [b, hkv, s, dv], k_buf [b, hkv, C, d],
    v_buf [b, hkv, C, dv], past: int64, o [b, hq, s_q, dv]): k and v written into the buffers at positions
    [past, past + s), then o, the attention over the buffers' first past + s positions (ir/ops/buffered_attention.py).
    Called by call_tir_inplace, the buffers it writes are the caller's: nothing of the cache is copied but the s new
    positions. past + s > C stops the call with an error before anything is written."""
    row = _row(hq, hkv, d, dv, scale=scale, causal=causal, window=window, softcap=softcap)
    gate = {MIN_WORK_ATTR: 0}

    @T.prim_func(s_tir=True)
    def main(q_h: T.handle, k_h: T.handle, v_h: T.handle, kb_h: T.handle, vb_h: T.handle, past: T.int64,
             o_h: T.handle):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
        n_b, s_q, s_n, cap = T.int64(), T.int64(), T.int64(), T.int64()
        q = T.match_buffer(q_h, (n_b, hq, s_q, d), "float32")
        k = T.match_buffer(k_h, (n_b, hkv, s_n, d), "float32")
        v = T.match_buffer(v_h, (n_b, hkv, s_n, dv), "float32")
        kb = T.match_buffer(kb_h, (n_b, hkv, cap, d), "float32")
        vb = T.match_buffer(vb_h, (n_b, hkv, cap, dv), "float32")
        o = T.match_buffer(o_h, (n_b, hq, s_q, dv), "float32")
        assert 0 <= past and past + s_n <= cap, "buffered_attention: the new keys do not fit in the cache buffers"
        for r in range(n_b * hkv * s_n):
            i = r % s_n
            h = r // s_n % hkv
            b = r // (s_n * hkv)
            for c in range(d):
                kb[b, h, past + i, c] = k[b, h, i, c]
            for c in range(dv):
                vb[b, h, past + i, c] = v[b, h, i, c]
        if n_b * hq * s_q * (past + s_n) * (d + dv) < MIN_PARALLEL_WORK:
            for task in range(n_b * hq * s_q):
                row(q, kb, vb, o, task, s_q, past + s_n)
        else:
            for task in T.parallel(n_b * hq * s_q, annotations=gate):
                row(q, kb, vb, o, task, s_q, past + s_n)

    return main
