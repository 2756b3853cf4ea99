"""Which IR nodes keep float32 arithmetic when a model is lowered to float16.

Half precision loses too much in long sums and in exponentials: a softmax over a few hundred
positions or a layer norm's variance drifts visibly, and squaring an activation of a few hundred
overflows fp16's 65504. So reductions and softmaxes ("anchors") compute in fp32, and so does
every elementwise or layout node whose value is used *only* by such fp32 nodes — the squared
deviations of a layer norm, the scaled and masked attention scores — because those values exist
only to be reduced. Everything else (matmuls, the residual stream, outputs) stays fp16.
"""

from __future__ import annotations

from collections import defaultdict

from pseudoformer.ir.graph import Graph
from pseudoformer.ir.ops import ARITH, UNARY, Op

ANCHORS = frozenset({Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MEAN, Op.SOFTMAX})

# Ops that may join an fp32 region backwards from an anchor. Gather and matmul are left out on
# purpose: widening an embedding table or a matmul would cost the memory and speed fp16 is for.
FOLLOWERS = frozenset(
    UNARY
    | ARITH
    | {Op.WHERE, Op.CAST, Op.TRANSPOSE, Op.UNSQUEEZE, Op.SQUEEZE, Op.RESHAPE, Op.SLICE, Op.CONCAT}
)


def fp32_nodes(graph: Graph) -> set[int]:
    """ids of the float nodes that compute in fp32 under a float16 lowering."""
    nodes = graph.nodes()
    users: dict[int, list[int]] = defaultdict(list)
    for n in nodes:
        for s in n.src:
            users[id(s)].append(id(n))
    outputs = {id(n) for _, n in graph.outputs}
    keep: set[int] = set()
    # Reverse topological order visits every user before the value it uses.
    for n in reversed(nodes):
        if not n.dtype.is_float:
            continue
        if n.op in ANCHORS:
            keep.add(id(n))
        elif (
            n.op in FOLLOWERS
            and id(n) not in outputs
            and users[id(n)]
            and all(u in keep for u in users[id(n)])
        ):
            keep.add(id(n))
    return keep
