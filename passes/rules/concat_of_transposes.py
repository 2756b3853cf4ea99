"""A concatenation of transposes with one permutation → the transpose of the concatenation, one transpose.

    concat(transpose(a₁; p), …, transpose(aₙ; p); k)   ⟶   transpose(concat(a₁, …, aₙ; p[k]); p)

Head batching stacks per-head weights (`heads.h.W_q`, read transposed in the row-major layout) as a concat of
their transposes; the torch backend (its "torch" pipeline) then computes the stacked weight from the stored
tensors as they are, and the gradient of each head's weight is a slice of rows rather than a transposed slice
of columns, which torch copies element by element into the parameter's gradient (a fifth of a GPT-2 step on
a CPU). Check: none is needed (the identity holds for every permutation), but every operand must be a
transpose, all with the same permutation.
"""

from __future__ import annotations

from dataclasses import dataclass

from pseudoformer.ir import Node, Op
from pseudoformer.passes.rule import Context, Rule


@dataclass
class Match:
    parts: tuple[Node, ...]
    perm: list[int]
    axis: int


def match(n: Node, src: tuple[Node, ...], ctx: Context) -> Match | None:
    if n.op is not Op.CONCAT or len(src) < 2 or any(s.op is not Op.TRANSPOSE for s in src):
        return None
    perm = list(src[0].attrs["perm"])
    if any(list(s.attrs["perm"]) != perm for s in src):
        return None
    return Match(tuple(s.src[0] for s in src), perm, n.attrs["axis"] % n.type.rank)


def rewrite(m: Match, root: Node) -> Node:
    joined = Node(Op.CONCAT, m.parts, {"axis": m.perm[m.axis]}, span=root.span, scope=root.scope)
    return Node(Op.TRANSPOSE, (joined,), {"perm": list(m.perm)}, span=root.span, scope=root.scope)


RULE = Rule("concat_of_transposes", match, rewrite)
