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
"""

from __future__ import annotations

from dataclasses import dataclass

from pseudoformer.ir import Graph, Node, Op
from pseudoformer.ir.graph import Consumers

_SWAP = (0, 2, 1, 3)


@dataclass(frozen=True)
class _Packed:
    q: Node  # the 3-D operands [batch, seq, H·d]; with a cache, k and v are the new positions'
    k: Node
    v: Node
    q_heads: int
    kv_heads: int
    out: Node  # the reshape that gives y3 (the attention's result in the packed form)
    gone: tuple[Node, ...]  # the head splits and merges it does without


def _split_heads(t: Node, att: Node, c: Consumers) -> tuple[Node, int] | None:
    """t = transpose(reshape(x3, [b, s, H, d]), [0, 2, 1, 3]) read only by att: (x3, H)."""
    if t.op is not Op.TRANSPOSE or tuple(t.attrs["perm"]) != _SWAP or not c.only_user(t, att):
        return None
    r = t.src[0]
    if r.op is not Op.RESHAPE or not c.only_user(r, t):
        return None
    x3 = r.src[0]
    h, d = r.shape[2], r.shape[3]
    if x3.type.rank != 3 or not isinstance(h, int) or not isinstance(d, int) or x3.shape[2] != h * d:
        return None
    if x3.shape[:2] != r.shape[:2]:
        return None
    return x3, h


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
    (q, hq), (k, hk), (v, hv) = sides  # type: ignore[misc]
    if hk != hv or hq % hk:
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
    splits = [x for s in n.src[:3] for x in (s, s.src[0])]
    return _Packed(q, k, v, hq, hk, out, (*splits, *([y] if cached else []), out.src[0]))


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

    for n in graph.nodes():
        if id(n) in found:
            p = found[id(n)]
            attrs = {**n.attrs, "q_heads": p.q_heads, "kv_heads": p.kv_heads}
            rest = tuple(get(s) for s in n.src[3:])  # the mask, or the past keys and values (and the mask)
            memo[id(n)] = Node(n.op, (get(p.q), get(p.k), get(p.v), *rest), attrs, span=n.span, scope=n.scope)
            continue
        if id(n) in merged_by:  # y3: the packed attention's result
            att = olds[merged_by[id(n)]]
            new = memo[id(att)]
            memo[id(n)] = new if att.op is Op.ATTENTION else Node(Op.GET, (new,), {"index": 0}, span=n.span,
                                                                  scope=n.scope)
            continue
        if id(n) in gone:
            continue
        src = tuple(get(s) for s in n.src)
        # Types are inferred anew: a `get` of a cached attention now reads the packed form.
        memo[id(n)] = n if all(a is b for a, b in zip(src, n.src, strict=True)) else \
            Node(n.op, src, dict(n.attrs), span=n.span, scope=n.scope)
    return Graph(list(graph.inputs), [(name, get(n)) for name, n in graph.outputs], dict(graph.meta)), True
