"""Find head-batched attentions the ONNX Attention op can take in its 3-D form, without transposes.

The IR's head batching (passes/head_batching.py) writes Algorithm 5's heads as

    q4 = transpose(reshape(q3, [b, s, H, d]), [0, 2, 1, 3])      (and k4, v4 alike)
    y3 = reshape(transpose(attention(q4, k4, v4), [0, 2, 1, 3]), [b, s, H·d])

ONNX Attention (opset 23) also takes q3, k3, v3 as [batch, seq, H·d] with q_num_heads = kv_num_heads
= H and returns y3 directly, which saves four transposes per layer on ORT CPU (measured in
benchmarks/bench_attention_ops.py: 1.45 → 1.15 ms per GPT-2 layer at seq 128). The lowering asks
this module which attentions qualify; the reshapes and transposes around them are then never
emitted. With a key/value cache the new keys and values go in 3-D too; past and present stay 4-D,
as the op has them.
"""

from __future__ import annotations

from dataclasses import dataclass

from pseudoformer.ir.graph import Graph
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

_SWAP = (0, 2, 1, 3)


@dataclass(frozen=True)
class Heads3D:
    q: Node  # the 3-D operands [batch, seq, H·d]; with a cache, k and v are the new positions'
    k: Node
    v: Node
    heads: int
    out: Node  # the reshape that gives y3: its value is the op's output


def find_3d_attention(graph: Graph, present: set[int], output_of: dict[int, str]) -> tuple[dict[int, Heads3D], set[int]]:
    """(attention id → its 3-D form, ids of the reshapes/transposes that then need no lowering)."""
    users: dict[int, list[Node]] = {}
    for n in graph.nodes():
        for s in n.src:
            users.setdefault(id(s), []).append(n)

    def only_user(n: Node, user: Node) -> bool:
        return [id(u) for u in users.get(id(n), [])] == [id(user)] and id(n) not in output_of

    def split_heads(t: Node, att: Node) -> tuple[Node, int] | None:
        """t = transpose(reshape(x3, [b, s, H, d]), [0, 2, 1, 3]) read only by att: (x3, H)."""
        if t.op is not Op.TRANSPOSE or tuple(t.attrs["perm"]) != _SWAP or not only_user(t, att):
            return None
        r = t.src[0]
        if r.op is not Op.RESHAPE or not only_user(r, t):
            return None
        x3 = r.src[0]
        h, d = r.shape[2], r.shape[3]
        if x3.type.rank != 3 or not isinstance(h, int) or not isinstance(d, int) or x3.shape[2] != h * d:
            return None
        if x3.shape[:2] != r.shape[:2]:
            return None
        return x3, h

    found: dict[int, Heads3D] = {}
    skip: set[int] = set()
    for n in graph.nodes():
        if n.op is not Op.ATTENTION or n.type.rank != 4:
            continue
        cached = id(n.src[1]) in present and id(n.src[2]) in present
        # with a cache, k and v are concat(past, new): the new part is what goes in 3-D
        heads = [(n.src[0], n), *((c.src[1], c) if cached else (c, n) for c in n.src[1:3])]
        sides = [split_heads(s, user) for s, user in heads]
        if any(s is None for s in sides) or len({s[1] for s in sides}) != 1:  # type: ignore[index]
            continue
        sq, sk = n.src[0].shape[-2], n.src[1].shape[-2]
        if n.attrs["causal"] and sq not in (1, sk) and not cached:
            continue  # lowered by parts (ONNX's is_causal without a past is top-left aligned): 4-D
        after = users.get(id(n), [])
        if len(after) != 1 or id(n) in output_of:
            continue
        u = after[0]
        if u.op is not Op.TRANSPOSE or tuple(u.attrs["perm"]) != _SWAP or len(users.get(id(u), [])) != 1:
            continue
        w = users[id(u)][0]
        if w.op is not Op.RESHAPE or w.type.rank != 3 or id(u) in output_of or w.shape[:2] != u.shape[:2]:
            continue
        (q, h), (k, _), (v, _) = sides  # type: ignore[misc]
        found[id(n)] = Heads3D(q, k, v, h, w)
        skip |= {id(s) for s, _ in heads} | {id(s.src[0]) for s, _ in heads} | {id(u), id(w)}
    return found, skip
