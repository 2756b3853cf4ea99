"""SwiGLU experts (Mixtral's): the gate and up products of each token's experts packed into one expert product.

    SiLU(E(W₁, r, x)) ⊙ E(W₃, r, x)        mul(silu(P?(expert_matmul(W₁, r, x))), P?(expert_matmul(W₃, r, x)))
      ⟶  P?(swiglu(expert_matmul(concat(W₁, W₃, axis=1), r, x); axis=last))

E is EXPERT_MATMUL (rules/expert_matmul.py makes it in the same pass), P an optional transpose, the same on
both sides. As rules/swiglu.py does for one MLP, the experts' rows are stacked gate first, so each expert reads
its tokens once and SWIGLU splits the result; ONNX Runtime folds the concatenation of initializers.

Refused, with the reason: products of different routes or rows, weights of different shapes, and a product or
SiLU something else also reads.
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
    silu: Node
    gate: Node  # expert_matmul(W₁, r, x)
    up: Node  # expert_matmul(W₃, r, x)
    moved: tuple[Node, ...]  # the transposes between them and the product
    perm: list[int] | None


def _through(n: Node) -> tuple[Node, Node | None]:
    return (n.src[0], n) if n.op is Op.TRANSPOSE else (n, None)


def match(n: Node, src: tuple[Node, ...], ctx: Context) -> Match | None:
    if n.op is not Op.MUL:
        return None
    for i in (0, 1):
        silu, other = src[i], src[1 - i]
        if silu.op is not Op.SILU:
            continue
        (gate, t1), (up, t2) = _through(silu.src[0]), _through(other)
        if gate.op is Op.EXPERT_MATMUL and up.op is Op.EXPERT_MATMUL and (t1 is None) == (t2 is None):
            perms = [list(t.attrs["perm"]) for t in (t1, t2) if t is not None]
            if perms and perms[0] != perms[1]:
                continue
            return Match(src, silu, gate, up, tuple(t for t in (t1, t2) if t is not None), perms[0] if perms else None)
    return None


def _same(a: Node, b: Node, depth: int = 4) -> bool:
    """One computation: the same node, or the same op on the same operands (the rows each expert product
    rebuilt from one X, in the pass that made them, before CSE merges them)."""
    if a is b:
        return True
    return depth > 0 and a.op is b.op and a.op is not Op.CONST and a.attrs == b.attrs and len(a.src) == len(b.src) and \
        all(_same(x, y, depth - 1) for x, y in zip(a.src, b.src, strict=True))


def check(m: Match, ctx: Context) -> str | None:
    (w1, r1, x1), (w3, r3, x3) = m.gate.src, m.up.src
    if not _same(r1, r3) or not _same(x1, x3):
        return "the gate and up experts read different routes or rows"
    if w1.type != w3.type:
        return f"the gate experts' {w1.type} and the up experts' {w3.type} differ"
    leak = escaping(ctx, m.src, [m.silu, m.gate, m.up, *m.moved])
    if leak is not None:
        return f"an intermediate of the gated experts is used elsewhere: {describe(leak)}"
    return None


def rewrite(m: Match, root: Node) -> Node:
    node = NodeBuilder(root)

    (w1, r, x), (w3, _, _) = m.gate.src, m.up.src
    packed = node(Op.EXPERT_MATMUL, node(Op.CONCAT, w1, w3, axis=1), r, x)
    out = node(Op.SWIGLU, packed, axis=packed.type.rank - 1)
    if m.perm is not None:
        out = node(Op.TRANSPOSE, out, perm=m.perm)
    assert out.type == root.type, f"expert swiglu fusion changed the type {root.type} to {out.type}"
    return out


RULE = Rule("expert_swiglu", match, rewrite, check)
