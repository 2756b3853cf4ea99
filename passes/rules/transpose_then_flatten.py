"""A product's rows transposed before they are flattened, not after: the same matrix, made by a transpose of its own.

    flatten(x)ᵀ y   matmul(transpose(flatten(x; r−1), [1, 0]), y)
                                ⟶  matmul(flatten(transpose(x, [r−1, 0, …, r−2]); 1), y)
    x: [B, ℓ, k] (rank r ≥ 3); both left operands [k, B·ℓ], element for element

This is a weight's gradient over a batch as rules/batched_weight_gradient.py and rules/transposed_product.py
write it: the product contracts the B·ℓ rows. In the IR the two forms are one computation; the difference is
onnxruntime's. There a Transpose read by a MatMul is fused into FusedMatMul(transA), and MLAS's SGEMM with a
transposed A copies A's transpose into a panel again for every 128 columns of B (sgemm.cpp,
MlasSgemmOperation): for the unembedding's gradient, [768, 1024] re-copied 393 times. A Flatten between the
Transpose and the MatMul is not fused, so A is transposed once, by a Transpose over x (3 MB for the unembedding's
at GPT-2 small's widths, batch 8), and the product is a plain MatMul. The interpreter and TVM transpose x once either way.

Only a wide product is rewritten: MLAS re-copies A once per 128 columns, so the copies it saves grow with the
columns, while onnxruntime's Transpose costs one copy of x, at a strided copy's speed.
Measured under load (benchmarks/ort_products_ab.py, benchmarks/history/bench_train.md), the unembedding's
gradient (50257 columns) ran 0.91–0.93× as long, median of paired rounds, in two runs; GPT-2's layer weights
(768–3072 columns) showed no gain beyond the noise, so they keep FusedMatMul(transA).
On the quiet machine the whole GPT-2 small step did not show it: 1.02× with the rule against without, within
the noise (bench_train.py --without transpose_then_flatten, 2026-11-28 16:22 UTC); kept for the product's own
gain measured above, smaller than that step's noise.

Check (why it refuses): the product must have at least MIN_COLUMNS columns, known at compile time; the transpose
must be read only by this product (otherwise it stays computed beside the new one, and x is transposed twice).
"""

from __future__ import annotations

from dataclasses import dataclass

from pseudoformer.ir import Node, Op
from pseudoformer.passes.rule import Context, Rule

# The unembedding's gradient (a vocabulary's columns) is rewritten, a layer's weights (GPT-2: at most 3072) are not.
MIN_COLUMNS = 8192


@dataclass
class Match:
    transposed: Node  # transpose(flatten(x))
    x: Node
    y: Node


def match(n: Node, src: tuple[Node, ...], ctx: Context) -> Match | None:
    if n.op is not Op.MATMUL or n.type.rank != 2:
        return None
    t, y = src
    if t.op is not Op.TRANSPOSE or list(t.attrs["perm"]) != [1, 0]:
        return None
    (f,) = t.src
    if f.op is not Op.FLATTEN:
        return None
    (x,) = f.src
    if x.type.rank < 3 or f.attrs["axis"] != x.type.rank - 1:
        return None
    return Match(t, x, y)


def check(m: Match, ctx: Context) -> str | None:
    columns = m.y.shape[-1]
    if not isinstance(columns, int) or columns < MIN_COLUMNS:
        return (f"the product has {columns} columns, fewer than {MIN_COLUMNS} (or not known): FusedMatMul(transA) "
                "re-copies A too few times for a Transpose of its own to pay")
    if not ctx.used_once(m.transposed):
        return "the transposed rows are also read elsewhere, so transposing them again would copy x twice"
    return None


def rewrite(m: Match, root: Node) -> Node:
    rank = m.x.type.rank
    columns_first = Node.at(root, Op.TRANSPOSE, (m.x,), {"perm": [rank - 1, *range(rank - 1)]})
    return Node.at(root, Op.MATMUL, (Node.at(root, Op.FLATTEN, (columns_first,), {"axis": 1}), m.y), {})


RULE = Rule("transpose_then_flatten", match, rewrite, check)
