"""A weight's gradient over a batch → one product over the batch's rows.

    Σ_b (a_bᵀ c_b)   reduce_sum(matmul(transpose(a, [0, 2, 1]), c); axes=[0])
                                    ⟶  matmul(transpose(flatten(a; 2), [1, 0]), flatten(c; 2))
    a: [B, ℓ, k], c: [B, ℓ, n]; both sides [k, n]

This is what the VJP of a product with a weight shared by the batch writes (ir/ops/matmul.py: aᵀ ct,
then summed over the axis the weight was broadcast along). As written, it is B products of the weight's
size and their sum: for GPT-2's unembedding [B, d_e, N_V] (786 MB at batch 8) where the result is one
[d_e, N_V], each product contracting only ℓ positions. Folded, it is one product contracting B·ℓ.

Check (why it refuses): a and c must have the same batch and position axes (no broadcast between them:
the rows of flatten(a) and flatten(c) must pair up), and the batched product must be read only by this
sum (otherwise it stays computed and the fold adds a second product).
"""

from __future__ import annotations

from dataclasses import dataclass

from pseudoformer.ir import Node, Op
from pseudoformer.passes.rule import Context, Rule


@dataclass
class Match:
    root: Node
    product: Node  # the batched matmul
    a: Node
    c: Node


def match(n: Node, src: tuple[Node, ...], ctx: Context) -> Match | None:
    if n.op is not Op.REDUCE_SUM or n.attrs.get("keepdims") or not n.dtype.is_float:
        return None
    (m,) = src
    if m.op is not Op.MATMUL or m.type.rank != 3 or [ax % 3 for ax in n.attrs["axes"]] != [0]:
        return None
    t, c = m.src
    if t.op is not Op.TRANSPOSE or list(t.attrs["perm"]) != [0, 2, 1] or c.type.rank != 3:
        return None
    return Match(n, m, t.src[0], c)


def check(m: Match, ctx: Context) -> str | None:
    if m.a.shape[:2] != m.c.shape[:2]:
        return (f"the operands' batch and position axes differ ({m.a.type} and {m.c.type}): "
                "their rows do not pair up")
    if not ctx.used_once(m.product):
        return "the batched product is also read elsewhere, so folding it would compute it twice"
    return None


def rewrite(m: Match, root: Node) -> Node:
    def at(op: Op, *src: Node, **attrs: object) -> Node:
        return Node.at(root, op, src, attrs)

    rows_a = at(Op.TRANSPOSE, at(Op.FLATTEN, m.a, axis=2), perm=[1, 0])
    return at(Op.MATMUL, rows_a, at(Op.FLATTEN, m.c, axis=2))


RULE = Rule("batched_weight_gradient", match, rewrite, check)
