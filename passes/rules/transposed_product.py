"""A transposed product whose operand is a transpose → the product the other way round, one transpose fewer.

    (xᵀ y)ᵀ   transpose(matmul(transpose(x), y))   ⟶  matmul(transpose(y), x)
    (x yᵀ)ᵀ   transpose(matmul(x, transpose(y)))   ⟶  matmul(y, transpose(x))

Every transpose here swaps the last two axes. A weight read transposed (X·Wᵀ, the row-major layout)
has the gradient (flatten(a)ᵀ flatten(c))ᵀ once rules/batched_weight_gradient.py folded its batch:
two transposes (two ONNX Transpose nodes) where one says it.

Check (why it refuses): the product must be read only by this transpose (otherwise it stays computed
and the rewrite adds a second product).
"""

from __future__ import annotations

from dataclasses import dataclass

from pseudoformer.ir import Node, Op
from pseudoformer.passes.rule import Context, Rule


def _swaps_last_two(n: Node) -> bool:
    rank = n.type.rank
    return n.op is Op.TRANSPOSE and rank >= 2 and list(n.attrs["perm"]) == [*range(rank - 2), rank - 1, rank - 2]


@dataclass
class Match:
    product: Node
    x: Node
    y: Node


def match(n: Node, src: tuple[Node, ...], ctx: Context) -> Match | None:
    if not _swaps_last_two(n) or src[0].op is not Op.MATMUL:
        return None
    x, y = src[0].src
    if x.type.rank != n.type.rank or y.type.rank != n.type.rank or not (_swaps_last_two(x) or _swaps_last_two(y)):
        return None
    return Match(src[0], x, y)


def check(m: Match, ctx: Context) -> str | None:
    if not ctx.used_once(m.product):
        return "the product is also read untransposed, so turning it round would compute it twice"
    return None


def rewrite(m: Match, root: Node) -> Node:
    def swapped(t: Node) -> Node:
        if _swaps_last_two(t):
            return t.src[0]
        rank = t.type.rank
        return Node.at(root, Op.TRANSPOSE, (t,), {"perm": [*range(rank - 2), rank - 1, rank - 2]})

    return Node.at(root, Op.MATMUL, (swapped(m.y), swapped(m.x)), {})


RULE = Rule("transposed_product", match, rewrite, check)
