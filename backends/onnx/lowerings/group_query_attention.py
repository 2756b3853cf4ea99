"""Attention → com.microsoft GroupQueryAttention, an onnxruntime kernel, behind `contrib_ops`.

    Y [, K, V] = attention(rotary(Q, cos, sin), rotary(K_new, cos, sin), V_new [, K_past, V_past];
                           causal, q_heads, kv_heads, scale)        Q, K_new, V_new slices of one QKV
  →
    Y [, K, V] = GroupQueryAttention(QKV, , , K_past, V_past, seqlens_k, total, cos', sin', position_ids;
                                     num_heads, kv_num_heads, scale, do_rotary)

Why: ONNX's Attention with past keys and values costs onnxruntime 1.32 about 0.07 ms a layer per
decoded token on the SmolLM2-sized Llama, a quarter of an int4 step, where its GroupQueryAttention
kernel appends to the cache and attends in a few microseconds, with the rotation of the queries and
keys inside (benchmarks/README.md). It is not a standard op, so only `contrib_ops=True` asks for it.

What it takes: a causal attention of the packed 3-D form (q [b, s, H·d], k and v [b, s, H_kv·d])
without a mask operand; a window w (Mistral's, key j seen by query i iff i − w < j ≤ i) is the
kernel's local_window_size w, measured equal. The kernel wants as many queries as new keys; the last layer's
queries after the last-position cut are one. Where the cut row comes from the packed product the keys
and values slice (and its rotation from their table), the cut is undone: the kernel takes the whole
product and its last row is kept, the same work as padding the one query (causal, the last row sees
exactly what it saw alone) without the ~30 nodes that cut, rotate and pad it. Otherwise that query is
padded in front to s rows, which attend and are dropped. Anything else keeps ONNX's Attention.

The rotation goes inside when the queries and keys are rotated by one cos/sin table of the new
positions [s, d/2] and d is a multiple of 16 (the kernel's requirement). The kernel looks rows of its
cos/sin cache up by position id and wants one row per position up to past + s: so the ids are 0 … s−1,
rows of our table of the new positions, and the table is padded with `past` unused rows. The three
projections are handed over packed (no Slice) when they are consecutive slices of one product.
"""

from __future__ import annotations

from collections.abc import Callable

from onnx import TensorProto

from pseudoformer.backends.onnx.emitter import Emitter
from pseudoformer.errors import BackendError
from pseudoformer.ir.graph import Graph
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op
from pseudoformer.ir.types import DType
from pseudoformer.passes.last_position import cut_from


def fits(n: Node) -> bool:
    """Whether GroupQueryAttention computes `n` exactly (see the module's docstring)."""
    cached = n.op is Op.CACHED_ATTENTION
    q, k = n.src[0], n.src[1]
    return (bool(n.attrs.get("q_heads", 0)) and bool(n.attrs["causal"])
            and len(n.src) == (5 if cached else 3) and q.dtype is DType.float32 and q.type.rank == 3
            and q.shape[1] in (k.shape[1], 1))


def buffered_cache_dim(graph: Graph) -> str:
    """The past-length dim of a decode step whose cache can live in buffers longer than it, which
    GroupQueryAttention appends to in place: every attention over the cache is one it takes, and the
    past keys and values are graph inputs read by nothing but their attention and their sizes.
    Otherwise a BackendError that says why."""
    consumers = graph.consumers()
    dims: set[object] = set()
    atts = [n for n in graph.nodes() if n.op is Op.CACHED_ATTENTION]
    if not atts:
        raise BackendError("the graph has no attention over a cache")
    for n in atts:
        if not fits(n):
            raise BackendError(f"the attention at {n.span or n.scope} is not one GroupQueryAttention takes")
        for past in n.src[3:5]:
            readers = {u.op for u in consumers.of(past)}
            if past.op is not Op.INPUT or not readers <= {Op.CACHED_ATTENTION, Op.DIM}:
                raise BackendError(f"the past keys and values at {n.span or n.scope} are read by more than "
                                   "their attention")
            dims.add(past.shape[2])
    if len(dims) != 1 or not isinstance(next(iter(dims)), str):
        raise BackendError("the caches do not share one run-time past length")
    return str(next(iter(dims)))


def _uncut(x: Node) -> Node | None:
    """x as it was before the last-position cut, when the cut is undone by dropping row slices: a
    rotation of (a column slice of) a cut row, with a cut table. The nodes made here only describe
    the uncut value to `_rotated` and `_packed`; what gets emitted is their operands'."""
    if (base := cut_from(x)) is not None:
        return base
    if x.op is Op.SLICE and x.attrs["axis"] % x.type.rank == x.type.rank - 1:
        inner = _uncut(x.src[0])
        return Node(Op.SLICE, (inner, *x.src[1:]), dict(x.attrs)) if inner is not None else None
    if x.op is Op.ROTARY:
        parts = [_uncut(s) for s in x.src]
        return Node(Op.ROTARY, tuple(parts), dict(x.attrs)) if all(p is not None for p in parts) else None
    return None


def _rotated(n: Node, q: Node | None = None) -> tuple[Node, Node, Node, Node] | None:
    """(q, k, cos, sin) before a rotation both share, when it can go inside the kernel; else None."""
    q, k = (q if q is not None else n.src[0]), n.src[1]
    if q.op is not Op.ROTARY or k.op is not Op.ROTARY or q.src[1:] != k.src[1:]:
        return None
    cos, sin = q.src[1], q.src[2]
    d = q.shape[-1] // int(n.attrs["q_heads"])
    same_rows = all(t.type.rank == 2 and t.shape == (q.shape[1], d // 2) for t in (cos, sin))
    if not same_rows or d % 16 or cos.dtype is not DType.float32:
        return None
    axis_last = all(r.attrs["axis"] % 3 == 2 for r in (q, k))
    heads = q.attrs.get("heads") == n.attrs["q_heads"] and k.attrs.get("heads") == n.attrs["kv_heads"]
    return (q.src[0], k.src[0], cos, sin) if axis_last and heads else None


def _packed(q: Node, k: Node, v: Node) -> Node | None:
    """The product whose last axis q, k and v slice in order and cover whole, or None."""
    def bounds(x: Node) -> tuple[Node, int, int] | None:
        if x.op is not Op.SLICE or x.attrs["axis"] % x.type.rank != x.type.rank - 1:
            return None
        start, end = (_whole(s) for s in x.src[1:3])
        return (x.src[0], start, end) if start is not None and end is not None else None

    parts = [bounds(x) for x in (q, k, v)]
    if any(p is None for p in parts):
        return None
    (pq, q0, q1), (pk, k0, k1), (pv, v0, v1) = parts  # type: ignore[misc]
    whole = pq.shape[-1]
    if not (pq is pk is pv and q0 == 0 and q1 == k0 and k1 == v0 and isinstance(whole, int) and v1 == whole):
        return None
    return pq


def _uncut_form(n: Node) -> tuple[tuple[Node, Node, Node, Node] | None, Node | None]:
    """(rotated, packed) of the attention with the last-position cut of its queries undone, when the
    queries are a slice of the product the keys and values slice too; else (None, None)."""
    q = n.src[0]
    if q.shape[1] == n.src[1].shape[1] or (whole := _uncut(q)) is None or whole.shape[1] != n.src[1].shape[1]:
        return None, None
    rotated = _rotated(n, whole) if whole.op is Op.ROTARY else None
    if whole.op is Op.ROTARY and rotated is None:  # rotated outside, by a table of its own: keep the cut
        return None, None
    q, k = (rotated[0], rotated[1]) if rotated else (whole, n.src[1])
    packed = _packed(q, k, n.src[2])
    return (rotated, packed) if packed is not None else (None, None)


def _whole(n: Node) -> int | None:
    if n.op is not Op.CONST or n.shape != ():
        return None
    value = float(n.attrs["value"])
    return int(value) if value.is_integer() else None


def _int32_scalar(e: Emitter, value: str) -> str:
    return e.emit("Cast", [e.emit("Squeeze", [value, e.ints([0])])], to=TensorProto.INT32)


def _shared(e: Emitter, key: tuple, make: Callable[[], str]) -> str:
    """A helper value every layer's kernel reads alike, made once (per local function's region)."""
    key = ("group query attention", e.region, *key)
    if key not in e.shared:
        e.shared[key] = make()
    return e.shared[key]


def emit(e: Emitter, n: Node) -> str | tuple[str, ...]:
    cached = n.op is Op.CACHED_ATTENTION
    cut = n.src[0].shape[1] != n.src[1].shape[1]  # one query (the last position) over s new keys
    rotated, packed = _uncut_form(n) if cut else (None, None)
    padded = cut and packed is None  # the cut stays: its one query is padded to s rows
    if packed is None:
        rotated = _rotated(n)
        packed = _packed(*(rotated[:2] if rotated else n.src[:2]), n.src[2])
    q, k = rotated[:2] if rotated else n.src[:2]
    qkv = [e.value(packed), "", ""] if packed is not None else [e.value(x) for x in (q, k, n.src[2])]
    if padded:
        rows = e.emit("Sub", [e.shape_dim(qkv[1], 1), e.ints([1])])
        qkv[0] = e.emit("Pad", [qkv[0], e.emit("Concat", [e.ints([0]), rows, e.ints([0, 0, 0, 0])], axis=0)])
    past = [e.value(x) for x in n.src[3:5]] if cached else ["", ""]
    # Sizes read off the graph's inputs where a dim is one of theirs, so that every layer shares them.
    dims = (k.shape[0], k.shape[1], n.src[3].shape[2] if cached else 0)
    batch = e.size_of(dims[0], (qkv[1] or qkv[0], 0))
    new = e.size_of(dims[1], (qkv[1] or qkv[0], 1))  # [1] int64: the new positions
    past_len = e.size_of(dims[2], (past[0], 2)) if cached else None
    total = _shared(e, ("total", dims), lambda: e.emit("Add", [new, past_len]) if past_len else new)
    total32 = _shared(e, ("total32", dims), lambda: _int32_scalar(e, total))
    seqlens = _shared(e, ("seqlens", dims), lambda: e.emit(
        "Expand", [e.emit("Sub", [total32, e.const(1, TensorProto.INT32)]), batch]))
    extra: list[str] = []
    if rotated:
        tables = [e.value(t) for t in rotated[2:]]
        if past_len is not None:  # one row per position up to past + s: the past's rows are never read
            pads = _shared(e, ("pads", dims), lambda: e.emit("Concat", [e.ints([0, 0]), past_len, e.ints([0])],
                                                              axis=0))
            tables = [_shared(e, ("table", t, dims), lambda t=t: e.emit("Pad", [t, pads])) for t in tables]
        ids = _shared(e, ("ids", dims), lambda: e.emit("Expand", [
            e.emit("Unsqueeze", [e.range(e.emit("Squeeze", [new, e.ints([0])])), e.ints([0])]),
            e.emit("Concat", [batch, new], axis=0)]))
        extra = [*tables, ids]
    inputs = [*qkv, *past, seqlens, total32, *extra]
    attrs = {"num_heads": int(n.attrs["q_heads"]), "kv_num_heads": int(n.attrs["kv_heads"]),
             "scale": float(n.attrs["scale"]), "do_rotary": int(rotated is not None)}
    if n.attrs.get("window", 0):
        attrs["local_window_size"] = int(n.attrs["window"])
    outputs = e.result_names(n, 3) if cached else [e.out]
    if cut:  # the rows before the last are dropped: the last is the one query asked for
        whole = f"{outputs[0]}.padded"
        e.emit_multi("GroupQueryAttention", inputs, [whole, *outputs[1:]], domain="com.microsoft", **attrs)
        e.emit("Slice", [whole, e.ints([-1]), e.ints([2**62]), e.ints([1])], out=outputs[0])
    else:
        e.emit_multi("GroupQueryAttention", inputs, outputs, domain="com.microsoft", **attrs)
    return tuple(outputs) if cached else outputs[0]
