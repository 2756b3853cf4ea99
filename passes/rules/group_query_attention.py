"""Causal packed-head attention → one group_query_attention (onnxruntime's GroupQueryAttention kernel).

    Y [, K, V] = attention(rotary(Q, cos, sin), rotary(K, cos, sin), V [, K_past, V_past];
                           causal, q_heads, kv_heads, scale, window)      Q, K, V slices of one QKV
      ⟶  group_query_attention(QKV [, K_past, V_past], cos, sin; packed, rotary, cached, …)

Why: ONNX's Attention with past keys and values costs onnxruntime 1.32 about 0.07 ms a layer per
decoded token on the SmolLM2-sized Llama, a quarter of an int4 step, where GroupQueryAttention
appends to the cache and attends in a few microseconds, with the rotation of the queries and keys
inside (benchmarks/README.md).

What it takes: a causal attention (or cached attention) in the packed 3-D form (q [b, s, H·d], k and v
[b, s, H_kv·d]), without a mask operand, in float32, whose queries are every new position or the
last alone; a window w is the kernel's local_window_size, a soft-cap c its softcap. In float16 (the
attention's softmax_fp32 carried to the fused op) only for a decode step whose cache lives in buffers the
kernel appends to (`rule(float16=True)`): generate's (CompileOptions.kv_buffers), whose fp16 tokens and scores
are checked against the fp32 run and the fp16 interpreter (tests/gpu/test_generate_float16.py), and an
onnxruntime-genai folder's with its lengths from the mask (past_present_share_buffer, as genai's builder writes
`-p fp16 -e cuda`), whose tokens genai gives as generate's (tests/gpu/test_genai_gpu_folder.py); a compiled
model's float16 attention stays ONNX Attention, as its file was.
Then, as far as the operands allow:
  rotary  q and k rotated by one cos/sin table of the new positions [s, d/2] in q's dtype, d a multiple of 16
          (the kernel's requirement): the rotation goes inside (`rotary`) and the unrotated slices are read;
          a partial rotation (rotary_dim) stays outside, as its own RotaryEmbedding;
  packed  q, k, v consecutive slices covering one product: the product is read whole (`packed`);
  last    the queries are the last-position cut (passes/last_position.py) of a row the keys and values
          slice too: the cut is undone, the kernel attends for every new position and its last row is
          kept (`last`), the work that padding the one query costs (causal, the last row sees exactly
          what it saw alone) without the ~30 nodes that cut, rotate and pad it.

Refused, with the reason: attention whose heads are not packed (Qwen3's and Gemma 3's q/k norms keep them
apart), that is not causal, has a mask, is neither float32 nor (in a buffered step) float16, or
whose queries are neither every new position nor the last.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from pseudoformer.ir import Node, Op
from pseudoformer.ir.types import DType
from pseudoformer.passes.last_position import cut_from
from pseudoformer.passes.rule import Context, Rule


@dataclass
class Match:
    att: Node
    src: tuple[Node, ...]


def match(n: Node, src: tuple[Node, ...], ctx: Context) -> Match | None:
    if n.op not in (Op.ATTENTION, Op.CACHED_ATTENTION):
        return None
    if not n.attrs.get("q_heads", 0) and not (n.op is Op.ATTENTION and n.type.rank == 4):
        return None  # the 4-D head form is refused with its reason; one head alone is no layer of heads
    return Match(n, src)


def check(m: Match, ctx: Context, float16: bool = False) -> str | None:
    cached = m.att.op is Op.CACHED_ATTENTION
    q, k = m.src[0], m.src[1]
    if not m.att.attrs.get("q_heads", 0):
        return "the heads are not packed into one axis (a per-head op between the projections and the attention, " \
               "a q/k norm, keeps them apart), and the kernel takes them packed"
    if not m.att.attrs["causal"]:
        return "the attention is not causal (the kernel's always is)"
    if len(m.src) != (5 if cached else 3):
        return "the attention has a mask operand, which the kernel does not take"
    if q.dtype is not DType.float32 and not (float16 and q.dtype is DType.float16):
        return f"the kernel is taken in float32 only, not {q.dtype.value} (float16 too in a decode step whose " \
               "cache lives in buffers: generate --contrib-ops, and a --genai-folder's)"
    if q.type.rank != 3 or q.shape[1] not in (k.shape[1], 1):
        return f"the queries {q.type} are neither every new position of the keys {k.type} nor the last"
    return None


def _whole(n: Node) -> int | None:
    if n.op is not Op.CONST or n.shape != ():
        return None
    value = float(n.attrs["value"])
    return int(value) if value.is_integer() else None


def _last_axis_slice(x: Node) -> bool:
    return x.op is Op.SLICE and x.attrs["axis"] % x.type.rank == x.type.rank - 1


def _uncut(x: Node) -> Node | None:
    """x as it was before the last-position cut, when the cut can be undone by dropping row slices: a
    rotation of (a column slice of) a cut row, with a cut table (or a cut table cast: an fp16 step's, computed in
    fp32). The nodes made here only describe the uncut value to `_rotated` and `_packed`; the fused op reads their
    operands, which are the graph's (a cast of the whole table, where the table was cast)."""
    if (base := cut_from(x)) is not None:
        return base
    if x.op is Op.CAST:  # row by row: the cast of the uncut value
        inner = _uncut(x.src[0])
        return Node(Op.CAST, (inner,), dict(x.attrs)) if inner is not None else None
    if _last_axis_slice(x):
        inner = _uncut(x.src[0])
        return Node(Op.SLICE, (inner, *x.src[1:]), dict(x.attrs)) if inner is not None else None
    if x.op is Op.ROTARY:
        parts = [_uncut(s) for s in x.src]
        return Node(Op.ROTARY, tuple(parts), dict(x.attrs)) if all(p is not None for p in parts) else None
    return None


def _rotated(att: Node, q: Node, k: Node) -> tuple[Node, Node, Node, Node] | None:
    """(q, k, cos, sin) before a rotation both share, when it can go inside the kernel; else None."""
    if q.op is not Op.ROTARY or k.op is not Op.ROTARY or not all(map(_same, q.src[1:], k.src[1:])):
        return None
    if q.attrs.get("rotary_dim", 0) or k.attrs.get("rotary_dim", 0):
        return None  # a partial rotation (GPT-NeoX's) stays outside: the kernel is given whole-head tables
    cos, sin = k.src[1], k.src[2]  # k's: the graph's own (q's may be an uncut description, `_uncut`)
    d = q.shape[-1] // int(att.attrs["q_heads"])
    same_rows = all(t.type.rank == 2 and t.shape == (q.shape[1], d // 2) for t in (cos, sin))
    if not same_rows or d % 16 or cos.dtype is not q.dtype or sin.dtype is not q.dtype:
        return None
    axis_last = all(r.attrs["axis"] % 3 == 2 for r in (q, k))
    heads = q.attrs.get("heads") == att.attrs["q_heads"] and k.attrs.get("heads") == att.attrs["kv_heads"]
    return (q.src[0], k.src[0], cos, sin) if axis_last and heads else None


def _same(a: Node, b: Node) -> bool:
    """One table: the same node, or casts of one node to one type (an uncut cast table and the graph's)."""
    return a is b or (a.op is b.op is Op.CAST and a.attrs == b.attrs and a.src[0] is b.src[0])


def _packed(q: Node, k: Node, v: Node) -> Node | None:
    """The product whose last axis q, k and v slice in order and cover whole, or None."""
    parts = []
    for x in (q, k, v):
        if not _last_axis_slice(x):
            return None
        start, end = (_whole(s) for s in x.src[1:3])
        if start is None or end is None:
            return None
        parts.append((x.src[0], start, end))
    (pq, q0, q1), (pk, k0, k1), (pv, v0, v1) = parts
    whole = pq.shape[-1]
    if not (pq is pk is pv and q0 == 0 and q1 == k0 and k1 == v0 and isinstance(whole, int) and v1 == whole):
        return None
    return pq


def _uncut_form(att: Node, src: tuple[Node, ...]) -> tuple[tuple[Node, Node, Node, Node] | None, Node] | None:
    """(rotated, packed) of the attention with the last-position cut of its queries undone, when the
    queries are a slice of the product the keys and values slice too; else None."""
    whole = _uncut(src[0])
    if whole is None or whole.shape[1] != src[1].shape[1]:
        return None
    rotated = _rotated(att, whole, src[1]) if whole.op is Op.ROTARY else None
    if whole.op is Op.ROTARY and rotated is None:  # rotated outside, by a table of its own: keep the cut
        return None
    q, k = (rotated[0], rotated[1]) if rotated else (whole, src[1])
    packed = _packed(q, k, src[2])
    return (rotated, packed) if packed is not None else None


def rewrite(m: Match, root: Node) -> Node:
    att, src = m.att, m.src
    cached = att.op is Op.CACHED_ATTENTION
    cut = src[0].shape[1] != src[1].shape[1]  # one query (the last position) over s new keys
    uncut = _uncut_form(att, src) if cut else None
    if uncut is not None:
        rotated, packed = uncut
    else:
        rotated = _rotated(att, src[0], src[1])
        packed = _packed(*(rotated[:2] if rotated else src[:2]), src[2])
    q, k = rotated[:2] if rotated else src[:2]
    operands = [packed] if packed is not None else [q, k, src[2]]
    operands += [*src[3:5]] if cached else []
    operands += [*rotated[2:]] if rotated else []
    attrs: dict[str, object] = {"scale": float(att.attrs["scale"]), "q_heads": int(att.attrs["q_heads"]),
                                "kv_heads": int(att.attrs["kv_heads"])}
    if att.attrs.get("window", 0):
        attrs["window"] = int(att.attrs["window"])
    if att.attrs.get("softcap", 0.0):  # Gemma 2's: the kernel caps the scaled scores before the mask, as ours does
        attrs["softcap"] = float(att.attrs["softcap"])
    flags = {"packed": packed is not None, "cached": cached, "rotary": rotated is not None, "last": uncut is not None,
             "softmax_fp32": bool(att.attrs.get("softmax_fp32"))}
    attrs |= {name: True for name, on in flags.items() if on}  # the others are false by default
    out = Node.at(root, Op.GROUP_QUERY_ATTENTION, tuple(operands), attrs)
    assert out.type == root.type, f"group query attention fusion changed the type {root.type} to {out.type}"
    return out


def rule(float16: bool) -> Rule:
    """The fusion; `float16`: float16 attention too (a decode step whose cache lives in buffers)."""
    return Rule("group_query_attention", match, rewrite, partial(check, float16=float16))


RULE = rule(False)
