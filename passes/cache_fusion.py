"""Cache fusion: attention over a cache and the new positions becomes one op that appends to the cache.

    K = concat(K_past, K_new), V = concat(V_past, V_new)        on the positions axis
    Y = attention(Q, K, V[, M])                                  K, V also the step's present outputs
  →
    R = cached_attention(Q, K_new, V_new, K_past, V_past[, M])
    Y = get(R, 0);  K = get(R, 1);  V = get(R, 2)

The decode step that passes/kv_cache.py derives concatenates the cache and the new keys and values
before its attention. A backend whose attention kernel appends to the cache itself (ONNX Attention's
past_key/past_value inputs and present outputs) then does it in one pass, without a separate copy.
It applies to 4-D (head-batched) attention whose concatenations nothing else reads but the graph's
outputs; a backend that lacks the fused op decomposes it back (passes/decompose.py).
"""

from __future__ import annotations

from pseudoformer.ir import Graph, Node, Op
from pseudoformer.ir.graph import Consumers


def _appended(c: Node, att: Node, slot: int, consumers: Consumers) -> bool:
    """c = concat(past, new) on the positions axis of a 4-D attention, read by `att` alone (and outputs)."""
    return (c.op is Op.CONCAT and len(c.src) == 2 and c.type.rank == 4 and c.attrs["axis"] % 4 == 2
            and [(id(u), i) for u, i in consumers.slots(c)] == [(id(att), slot)])


def fuse_cache(graph: Graph) -> tuple[Graph, bool]:
    consumers = graph.consumers()
    fused: dict[int, Node] = {}  # id(old node) → its replacement
    for n in graph.nodes():
        if n.op is not Op.ATTENTION or n.src[1].type.rank != 4:
            continue
        k, v = n.src[1], n.src[2]
        if not (_appended(k, n, 1, consumers) and _appended(v, n, 2, consumers)):
            continue
        fused[id(n)] = n
    if not fused:
        return graph, False
    memo: dict[int, Node] = {}

    def get(n: Node) -> Node:
        return memo[id(n)]

    for n in graph.nodes():
        if id(n) in memo:
            continue
        if id(n) in fused:
            q, k, v = (get(s) for s in n.src[:3])
            (pk, kn), (pv, vn) = (tuple(get(x) for x in c.src) for c in n.src[1:3])
            mask = tuple(get(s) for s in n.src[3:])
            r = Node.at(n, Op.CACHED_ATTENTION, (q, kn, vn, pk, pv, *mask), dict(n.attrs))
            memo[id(n)] = Node.at(n, Op.GET, (r,), {"index": 0})
            memo[id(n.src[1])] = Node.at(n, Op.GET, (r,), {"index": 1})
            memo[id(n.src[2])] = Node.at(n, Op.GET, (r,), {"index": 2})
            continue
        src = tuple(get(s) for s in n.src)
        memo[id(n)] = n if all(a is b for a, b in zip(src, n.src, strict=True)) else \
            Node.at(n, n.op, src, dict(n.attrs), type=n.type)
    return Graph(list(graph.inputs), [(name, get(n)) for name, n in graph.outputs], dict(graph.meta)), True
