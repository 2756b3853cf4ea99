"""The SwiGLU MLP's gate (Shazeer, 2020) → one SWIGLU over the gate and up projections packed in one product.

    SiLU(W₁ X) ⊙ W₃ X                         mul(silu(matmul(W₁, X)), matmul(W₃, X)), either order
      ⟶  swiglu(matmul(concat(W₁, W₃, axis=0), X); axis = X's feature axis)

W₁ and W₃ are matrices of one shape that multiply the same X from the left (the paper's layout);
their rows are stacked, gate first, so one product reads X once and SWIGLU splits it. The weights
are stacked with CONCAT of the PARAMs, as head batching stacks heads, so checkpoint names stay as
they are; ONNX Runtime folds the concatenation of initializers into one.

Refused, with the reason: projections of different inputs or shapes, and a product or the SiLU
that something else also reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from pseudoformer.ir import Node, Op
from pseudoformer.ir.node import NodeBuilder
from pseudoformer.passes.rule import Context, Rule
from pseudoformer.passes.rules.matching import describe, escaping


@dataclass
class Match:
    src: tuple[Node, ...]
    gate: Node  # matmul(W₁, X)
    up: Node  # matmul(W₃, X)
    silu: Node


def _projection(n: Node) -> bool:
    return n.op is Op.MATMUL and n.src[0].type.rank == 2 and n.src[1].type.rank >= 2


def match(n: Node, src: tuple[Node, ...], ctx: Context) -> Match | None:
    if n.op is not Op.MUL:
        return None
    for i in (0, 1):
        silu, up = src[i], src[1 - i]
        if silu.op is Op.SILU and _projection(silu.src[0]) and _projection(up):
            return Match(src, silu.src[0], up, silu)
    return None


def check(m: Match, ctx: Context) -> str | None:
    (w1, x1), (w3, x3) = m.gate.src, m.up.src
    if x1 is not x3:
        return "the gate and the up projection read different inputs"
    if w1.type != w3.type:
        return f"the gate's weight {w1.type} and the up projection's {w3.type} differ"
    leak = escaping(ctx, m.src, [m.silu, m.gate, m.up])
    if leak is not None:
        return f"an intermediate of the gated unit is used elsewhere: {describe(leak)}"
    return None


def rewrite(m: Match, root: Node) -> Node:
    (w1, x), (w3, _) = m.gate.src, m.up.src
    node = NodeBuilder(root)

    packed = node(Op.MATMUL, node(Op.CONCAT, w1, w3, axis=0), x)
    out = node(Op.SWIGLU, packed, axis=packed.type.rank - 2)
    assert out.type == root.type, f"swiglu fusion changed the type {root.type} to {out.type}"
    return out


RULE = Rule("swiglu", match, rewrite, check)
