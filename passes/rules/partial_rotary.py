"""A rotation of the first r coordinates, the rest passed through (GPT-NeoX's rotary_pct) → one ROTARY.

    [rotary(x[0 : r], c, s; axis) ; x[r : d]]        concat(rotary(slice(x, 0, r)), slice(x, r, d)) along axis
      ⟶  rotary(x, c, s; axis, rotary_dim = r)

This is what `Q̃ ← [RoPE(Q[1:r, :] | b); Q[r + 1 : d_attn, :]]` (models/gpt_neox.alg, the gallery's
neox.alg) becomes once rules/rotary.py has fused the rotation of the slice: the partial form is one op,
so head batching stacks it over the heads like a whole rotation, and ONNX's RotaryEmbedding takes it
as its rotary_embedding_dim. It runs in the rotary fusion's pass, after rules/rotary.py.

Refused, with the reason: slices of different values, slices that do not split x at r and cover it,
and a rotated slice something else also reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from pseudoformer.ir import Node, Op
from pseudoformer.passes.rule import Context, Rule
from pseudoformer.passes.rules.matching import const_value, describe, escaping


@dataclass
class Match:
    src: tuple[Node, ...]
    rot: Node
    x: Node
    axis: int
    r: int
    problem: str | None = None


def _bounds(n: Node, axis: int) -> tuple[int, int] | None:
    if n.op is not Op.SLICE or n.attrs["axis"] % n.type.rank != axis:
        return None
    lo, hi = const_value(n.src[1]), const_value(n.src[2])
    return None if lo is None or hi is None else (int(lo), int(hi))


def match(n: Node, src: tuple[Node, ...], ctx: Context) -> Match | None:
    if n.op is not Op.CONCAT or len(src) != 2:
        return None
    rot, rest = src
    axis = n.attrs["axis"] % n.type.rank
    if rot.op is not Op.ROTARY or rot.attrs.get("heads", 0) or rot.attrs.get("rotary_dim", 0) \
            or rot.attrs["axis"] % rot.type.rank != axis:
        return None
    head, tail = _bounds(rot.src[0], axis), _bounds(rest, axis)
    if head is None or tail is None:
        return None
    x = rot.src[0].src[0]
    m = Match(src=src, rot=rot, x=x, axis=axis, r=head[1])
    d = x.shape[axis]
    if rest.src[0] is not x:
        m.problem = "the rotated and the passed coordinates are slices of different values"
    elif head[0] != 0 or tail != (head[1], d):
        m.problem = f"the slices [{head[0]}, {head[1]}) and [{tail[0]}, {tail[1]}) do not split axis {axis} " \
                    f"of {x.type} into a rotated head and the rest"
    return m


def check(m: Match, ctx: Context) -> str | None:
    if m.problem is not None:
        return m.problem
    leak = escaping(ctx, m.src, [m.rot, m.rot.src[0]])
    if leak is not None:
        return f"an intermediate of the partial rotation is used elsewhere: {describe(leak)}"
    return None


def rewrite(m: Match, root: Node) -> Node:
    out = Node.at(root, Op.ROTARY, (m.x, *m.rot.src[1:]), {**m.rot.attrs, "rotary_dim": m.r})
    assert out.type == root.type, f"partial rotary fusion changed the type {root.type} to {out.type}"
    return out


RULE = Rule("partial_rotary", match, rewrite, check)
