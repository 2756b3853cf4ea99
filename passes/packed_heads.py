"""Packed heads: head-batched attention on [batch, positions, H·d] directly, without the head transposes.

Head batching (passes/head_batching.py) writes Algorithm 5's heads as

    q4 = transpose(reshape(q3, [b, s, H, d]), [0, 2, 1, 3])      (and k4, v4 alike)
    y3 = reshape(transpose(attention(q4, k4, v4), [0, 2, 1, 3]), [b, s, H·d])
  →
    y3 = attention(q3, k3, v3; q_heads = H, kv_heads = H_kv)

the packed form of the op (ir/ops/attention.py), which ONNX's Attention takes in 3-D: four
transposes fewer per layer on ORT CPU (benchmarks/bench_attention_ops.py: 1.45 → 1.15 ms per GPT-2
layer at seq 128). With a key/value cache (passes/cache_fusion.py) the new keys and values go in
3-D too; past and present stay [b, H_kv, positions, d], as the op has them. A causal attention whose
queries are neither one position nor all of them stays 4-D: ONNX's is_causal without a past is
top-left aligned, and the backend lowers that case by parts.

A rotary embedding between the split and the attention (Llama's RoPE on the queries and keys, after
head batching and layout: rotary(transpose(reshape(x3))) or transpose(rotary(reshape(x3)))) packs with
them: rotary(x3; heads = H) on [batch, positions, H·d], ONNX's RotaryEmbedding in 3-D, its angles
[positions, d/2] shared by the heads. So does an RMS norm over d before the rotation (Qwen3's and Gemma 3's q/k
norms): reshape(rms_norm(reshape(x3, [b, s, H, d])), [b, s, H·d]), no transpose, and the rest packed.
"""

from __future__ import annotations

from dataclasses import dataclass

from pseudoformer.ir import Graph, Node, Op
from pseudoformer.ir.graph import Consumers

_SWAP = (0, 2, 1, 3)


@dataclass(frozen=True)
class _Side:
    """One of q, k, v in the packed form: x3 [batch, seq, H·d], rotated by `rot` = (cos, sin) if given."""

    x3: Node
    heads: int
    rot: tuple[Node, Node] | None
    gone: tuple[Node, ...]  # the split (and the 4-D rotation) the packed form does without
    rotary_dim: int = 0  # a partial rotation's (0: all of each head)
    norm: tuple[Node, float] | None = None  # (γ, ε) of an RMS norm over each head's d, before the rotation


@dataclass(frozen=True)
class _Packed:
    q: _Side  # with a cache, k and v are the new positions'
    k: _Side
    v: _Side
    out: Node  # the reshape that gives y3 (the attention's result in the packed form)
    gone: tuple[Node, ...]  # the head splits and merges it does without


def _angles(t: Node, c: Consumers, user: Node) -> tuple[Node, Node] | None:
    """(cos, sin) of a rotary over the last axis read only by `user`, as [seq, d/2] shared by all heads."""
    if t.op is not Op.ROTARY or t.attrs.get("heads", 0) or t.attrs["axis"] % 4 != 3 or not c.only_user(t, user):
        return None
    angles = []
    for a in t.src[1:]:
        if a.type.rank == 3 and a.shape[1] == 1 and a.op is Op.UNSQUEEZE and a.src[0].type.rank == 2:
            a = a.src[0]  # [seq, 1, d/2] beside [b, seq, H, d]: the unit axis stands for the heads
        if a.type.rank > 2:
            return None
        angles.append(a)
    return angles[0], angles[1]


def _split_heads(t: Node, att: Node, c: Consumers) -> _Side | None:
    """t = transpose(reshape(x3, [b, s, H, d]), [0, 2, 1, 3]) read only by att, or that with a rotary
    embedding over d before or after the transpose."""
    rot, gone, rotary_dim = None, [t], 0
    if t.op is Op.ROTARY:  # after the transpose: [b, H, s, d], angles [s, d/2]
        rot, rotary_dim = _angles(t, c, att), int(t.attrs.get("rotary_dim", 0))
        if rot is None:
            return None
        t, user = t.src[0], t
        gone.append(t)
    else:
        user = att
    norm = None
    if t.op is Op.RMS_NORM and t.attrs["axis"] % 4 == 3 and c.only_user(t, user):
        norm = (t.src[1], float(t.attrs["eps"]))
        t, user = t.src[0], t
        gone.append(t)
    if t.op is not Op.TRANSPOSE or tuple(t.attrs["perm"]) != _SWAP or not c.only_user(t, user):
        return None
    r = t.src[0]
    if r.op is Op.ROTARY and rot is None and norm is None:  # before the transpose: [b, s, H, d], angles [s, 1, d/2]
        rot, rotary_dim = _angles(r, c, t), int(r.attrs.get("rotary_dim", 0))
        if rot is None:
            return None
        gone.append(r)
        t, r = r, r.src[0]
    if r.op is not Op.RESHAPE or not c.only_user(r, t):
        return None
    gone.append(r)
    x3 = r.src[0]
    h, d = r.shape[2], r.shape[3]
    if x3.type.rank != 3 or not isinstance(h, int) or not isinstance(d, int) or x3.shape[2] != h * d:
        return None
    if x3.shape[:2] != r.shape[:2]:
        return None
    return _Side(x3, h, rot, tuple(gone), rotary_dim, norm)


def _merged(y: Node, c: Consumers) -> Node | None:
    """The reshape(transpose(y, [0, 2, 1, 3]), [b, s, H·d]) that is y's one use, if it is."""
    after = c.of(y)
    if len(after) != 1 or c.is_output(y):
        return None
    u = after[0]
    if u.op is not Op.TRANSPOSE or tuple(u.attrs["perm"]) != _SWAP or len(c.of(u)) != 1 or c.is_output(u):
        return None
    w = c.of(u)[0]
    if w.op is not Op.RESHAPE or w.type.rank != 3 or w.shape[:2] != u.shape[:2]:
        return None
    return w


def _find(n: Node, c: Consumers) -> _Packed | None:
    cached = n.op is Op.CACHED_ATTENTION
    if n.op not in (Op.ATTENTION, Op.CACHED_ATTENTION) or n.src[0].type.rank != 4 or n.attrs.get("q_heads", 0):
        return None
    sides = [_split_heads(s, n, c) for s in n.src[:3]]
    if any(s is None for s in sides):
        return None
    q, k, v = sides  # type: ignore[misc]
    if k.heads != v.heads or q.heads % k.heads or v.rot is not None:
        return None
    sq, sk = n.src[0].shape[-2], n.src[1].shape[-2]
    if n.attrs["causal"] and sq not in (1, sk) and not cached:
        return None
    y = n
    if cached:
        gets = [u for u in c.of(n) if u.op is Op.GET and u.attrs["index"] == 0]
        if len(gets) != 1:
            return None
        y = gets[0]
    out = _merged(y, c)
    if out is None:
        return None
    splits = [x for side in sides for x in side.gone]  # type: ignore[union-attr]
    return _Packed(q, k, v, out, (*splits, *([y] if cached else []), out.src[0]))


def pack_heads(graph: Graph) -> tuple[Graph, bool]:
    c = graph.consumers()
    found = {id(n): p for n in graph.nodes() if (p := _find(n, c)) is not None}
    if not found:
        return graph, False
    merged_by = {id(p.out): key for key, p in found.items()}
    gone = {id(x) for p in found.values() for x in p.gone}
    memo: dict[int, Node] = {}
    olds = {id(n): n for n in graph.nodes()}

    def get(n: Node) -> Node:
        return memo[id(n)]

    def normed(side: _Side, like: Node) -> Node:
        x3 = get(side.x3)
        if side.norm is None:
            return x3
        *lead, width = x3.shape
        heads = Node.at(like, Op.RESHAPE, (x3,), {"shape": [*lead, side.heads, width // side.heads]})
        y = Node.at(like, Op.RMS_NORM, (heads, get(side.norm[0])), {"axis": 3, "eps": side.norm[1]})
        return Node.at(like, Op.RESHAPE, (y,), {"shape": list(x3.shape)})

    def packed(side: _Side, like: Node) -> Node:
        if side.rot is None:
            return normed(side, like)
        partial = {"rotary_dim": side.rotary_dim} if side.rotary_dim else {}
        return Node.at(like, Op.ROTARY, (normed(side, like), *(get(a) for a in side.rot)),
                       {"axis": 2, "heads": side.heads, **partial})

    for n in graph.nodes():
        if id(n) in found:
            p = found[id(n)]
            attrs = {**n.attrs, "q_heads": p.q.heads, "kv_heads": p.k.heads}
            rest = tuple(get(s) for s in n.src[3:])  # the mask, or the past keys and values (and the mask)
            sides = tuple(packed(side, s) for side, s in zip((p.q, p.k, p.v), n.src[:3], strict=True))
            memo[id(n)] = Node.at(n, n.op, (*sides, *rest), attrs)
            continue
        if id(n) in merged_by:  # y3: the packed attention's result
            att = olds[merged_by[id(n)]]
            new = memo[id(att)]
            memo[id(n)] = new if att.op is Op.ATTENTION else Node.at(n, Op.GET, (new,), {"index": 0})
            continue
        if id(n) in gone:
            continue
        src = tuple(get(s) for s in n.src)
        # Types are inferred anew: a `get` of a cached attention now reads the packed form.
        memo[id(n)] = n if all(a is b for a, b in zip(src, n.src, strict=True)) else \
            Node.at(n, n.op, src, dict(n.attrs))
    return Graph(list(graph.inputs), [(name, get(n)) for name, n in graph.outputs], dict(graph.meta)), True
