"""Per-op layout rules for the row-major layout pass (passes/layout.py).

A layout L of a node n is a permutation of n's axes: the version of n in layout L holds
np.transpose(value(n), L). An op "absorbs" L when it can compute that version directly from
versions of its operands, with its axes attributes remapped, instead of computing value(n) and
transposing it. Each rule answers four questions:

  plan(n, L, avail)  the operand layouts from which n can be built in layout L, or None if it
                     cannot absorb L. An entry None means "any layout will do" (DIM reads a size).
                     `avail[i]` lists the layouts operand i already exists in; where several
                     plans would do, the rule picks one that needs no new transpose.
  build(n, L, src, lay)  the version of n in layout L, given operand versions `src` in layouts `lay`.
  induce(n, i, Q)    the layout of n that operand i in layout Q suggests (for transpose sinking).
  prefer(n, P)       the layout n should take when its users would like P (None: no opinion): P
                     itself if n can absorb it, the nearest layout it can absorb otherwise, and the
                     layout that puts its reduction axis last for ops whose speed depends on it.
  cost(n, L)         what n itself costs in layout L beyond the best one, in transposes.
"""

from __future__ import annotations

from collections.abc import Sequence

from pseudoformer.ir import Node, Op
from pseudoformer.ir.ops import op_def

Perm = tuple[int, ...]
Avail = Sequence[Sequence[Perm]] | None


def ident(rank: int) -> Perm:
    return tuple(range(rank))


def inverse(p: Sequence[int]) -> Perm:
    inv = [0] * len(p)
    for i, a in enumerate(p):
        inv[a] = i
    return tuple(inv)


def compose(a: Sequence[int], b: Sequence[int]) -> Perm:
    """The perm c with transpose(transpose(x, a), b) == transpose(x, c)."""
    return tuple(a[i] for i in b)


def move_last(p: Sequence[int], axes: Sequence[int]) -> Perm:
    """p with `axes` moved to the end, in ascending order, the others keeping their order."""
    return tuple(a for a in p if a not in axes) + tuple(sorted(axes))


def norm_axes(axes: Sequence[int], rank: int) -> list[int]:
    return sorted(a % rank for a in axes)


def new_node(n: Node, op: Op, src: Sequence[Node], attrs: dict) -> Node:
    # Reusing n when nothing changed keeps an already row-major graph the very same graph.
    if op is n.op and len(src) == len(n.src) and all(a is b for a, b in zip(src, n.src, strict=True)) \
            and attrs == n.attrs:
        return n
    return Node.at(n, op, tuple(src), attrs)


def respell(old: object, new: int | list[int], rank: int) -> object:
    """`new` (an axis or sorted axes), in the attribute's old spelling (-1, an unsorted list) when it
    names the same axes: a node the layout leaves in place stays the very same node."""
    if isinstance(new, int):
        return old if isinstance(old, int) and old % rank == new else new
    return old if sorted(a % rank for a in old) == new else new  # type: ignore[union-attr]


def restrict(L: Perm, rank: int) -> tuple[Perm, list[int]]:
    """A right-aligned operand of `rank` under an output layout L: its own layout, and the axes at
    which to unsqueeze it so that it still broadcasts."""
    off = len(L) - rank
    q = tuple(a - off for a in L if a >= off)
    if not q:
        return q, []
    first = min(i for i, a in enumerate(L) if a >= off)
    # Output axes the operand lacks that land among its own need a unit axis there; those
    # before all of its axes are left to right-aligned broadcasting.
    ins = [i - first for i, a in enumerate(L) if a < off and i > first]
    return q, ins


class LayoutRule:
    """The default: an op that only absorbs the identity layout (INPUT, PARAM, and anything unknown)."""

    def plan(self, n: Node, L: Perm, avail: Avail) -> list[Perm | None] | None:
        return [ident(s.type.rank) for s in n.src] if L == ident(len(L)) else None

    def build(self, n: Node, L: Perm, src: Sequence[Node], lay: Sequence[Perm]) -> Node:
        return new_node(n, n.op, src, dict(n.attrs))

    def induce(self, n: Node, i: int, Q: Perm) -> Perm | None:
        return None

    def prefer(self, n: Node, P: Perm | None) -> Perm | None:
        if P is None or self.plan(n, P, None) is not None:
            return P
        return ident(len(P))

    def cost(self, n: Node, L: Perm) -> float:
        return 0.0


class Elementwise(LayoutRule):
    """Unary and broadcasting n-ary ops: each operand takes the output layout restricted to its axes."""

    def plan(self, n: Node, L: Perm, avail: Avail) -> list[Perm | None] | None:
        return [restrict(L, s.type.rank)[0] for s in n.src]

    def build(self, n: Node, L: Perm, src: Sequence[Node], lay: Sequence[Perm]) -> Node:
        return new_node(n, n.op, broadcast_operands(L, src), dict(n.attrs))

    def induce(self, n: Node, i: int, Q: Perm) -> Perm | None:
        off = len(n.shape) - len(Q)
        return tuple(range(off)) + tuple(a + off for a in Q)

    def prefer(self, n: Node, P: Perm | None) -> Perm | None:
        return P


def broadcast_operands(L: Perm, src: Sequence[Node]) -> list[Node]:
    """Operands laid out by restrict(L, ·), with unit axes where they must still broadcast."""
    rank = len(L)
    ops = []
    for s in src:
        _, ins = restrict(L, s.type.rank)
        ops.append(Node.at(s, Op.UNSQUEEZE, (s,), {"axes": ins}) if ins else s)
    # A [d, 1] bias turned into [1, d] is a [d] row vector to broadcasting; drop the unit axes
    # an UNSQUEEZE put in front, as long as some operand still carries the output's rank.
    stripped = [_strip_leading(s) for s in ops]
    if max((s.type.rank for s in stripped), default=0) == rank:
        ops = stripped
    return ops


class Rotary(Elementwise):
    """ROTARY: the angles c and s broadcast against x like an elementwise op's operands, and the rotated
    axis is remapped. The packed form (made after layout) keeps its layout."""

    def plan(self, n: Node, L: Perm, avail: Avail) -> list[Perm | None] | None:
        if n.attrs.get("heads", 0) and L != ident(len(L)):
            return None
        return super().plan(n, L, avail)

    def build(self, n: Node, L: Perm, src: Sequence[Node], lay: Sequence[Perm]) -> Node:
        axis = respell(n.attrs["axis"], L.index(n.attrs["axis"] % len(L)), len(L))
        return new_node(n, Op.ROTARY, broadcast_operands(L, src), {**n.attrs, "axis": axis})

    def prefer(self, n: Node, P: Perm | None) -> Perm | None:
        return P if P is None or self.plan(n, P, None) is not None else ident(len(P))


def _strip_leading(s: Node) -> Node:
    """s without the leading unit axes an UNSQUEEZE or RESHAPE put in front of its operand."""
    if s.op is Op.RESHAPE:
        shape = tuple(s.attrs["shape"])
        k = 0
        while k < len(shape) - 1 and shape[k] == 1:
            k += 1
        if k == 0:
            return s
        if shape[k:] == s.src[0].shape:
            return s.src[0]
        return Node.at(s, Op.RESHAPE, s.src, {"shape": shape[k:]})
    if s.op is not Op.UNSQUEEZE:
        return s
    axes = norm_axes(s.attrs["axes"], s.type.rank)
    k = 0
    while k < len(axes) and axes[k] == k:
        k += 1
    if k == 0:
        return s
    rest = [a - k for a in axes[k:]]
    if not rest:
        return s.src[0]
    return Node.at(s, Op.UNSQUEEZE, s.src, {"axes": rest})


class Transpose(LayoutRule):
    """A transpose is absorbed by its operand's layout: it becomes no node at all."""

    def plan(self, n: Node, L: Perm, avail: Avail) -> list[Perm | None] | None:
        return [compose(n.attrs["perm"], L)]

    def build(self, n: Node, L: Perm, src: Sequence[Node], lay: Sequence[Perm]) -> Node:
        return src[0]

    def induce(self, n: Node, i: int, Q: Perm) -> Perm | None:
        inv = inverse(n.attrs["perm"])
        return tuple(inv[a] for a in Q)

    def prefer(self, n: Node, P: Perm | None) -> Perm | None:
        return P


def _batch_plan(B: Perm, rank: int, out_batch: int) -> Perm | None:
    """An operand with rank−2 batch axes (right-aligned) under output batch layout B."""
    off = out_batch - (rank - 2)
    present = [i for i, a in enumerate(B) if a >= off]
    if present and any(B[i] < off for i in range(present[0], len(B))):
        return None  # a missing batch axis between its own: it would need a unit axis inside
    return tuple(a - off for a in B if a >= off)


class Matmul(LayoutRule):
    """W X in [b, out, s] is Xᵀ Wᵀ in [b, s, out]: a swapped output layout swaps and permutes operands."""

    def plan(self, n: Node, L: Perm, avail: Avail) -> list[Perm | None] | None:
        R = len(L)
        if sorted(L[-2:]) != [R - 2, R - 1]:
            return None
        swapped = L[-2] == R - 1
        out: list[Perm | None] = []
        for s in n.src:
            r = s.type.rank
            b = _batch_plan(L[:-2], r, R - 2)
            if b is None:
                return None
            out.append(b + ((r - 1, r - 2) if swapped else (r - 2, r - 1)))
        return out

    def build(self, n: Node, L: Perm, src: Sequence[Node], lay: Sequence[Perm]) -> Node:
        a, b = src
        return new_node(n, Op.MATMUL, (b, a) if L[-2] == len(L) - 1 else (a, b), {})

    def induce(self, n: Node, i: int, Q: Perm) -> Perm | None:
        r, R = len(Q), len(n.shape)
        if sorted(Q[-2:]) != [r - 2, r - 1]:
            return None
        off = R - r
        B = tuple(range(off)) + tuple(a + off for a in Q[:-2])
        return B + ((R - 1, R - 2) if Q[-2] == r - 1 else (R - 2, R - 1))

    def prefer(self, n: Node, P: Perm | None) -> Perm | None:
        if P is None or self.plan(n, P, None) is not None:
            return P
        R = len(P)
        tail = (R - 1, R - 2) if P.index(R - 1) < P.index(R - 2) else (R - 2, R - 1)
        L = tuple(a for a in P if a < R - 2) + tail
        return L if self.plan(n, L, None) is not None else ident(R - 2) + tail


class Attention(LayoutRule):
    """ATTENTION works on the last two axes, already row-major: only its batch axes may permute."""

    def plan(self, n: Node, L: Perm, avail: Avail) -> list[Perm | None] | None:
        R = len(L)
        if L[-2:] != (R - 2, R - 1):
            return None
        out: list[Perm | None] = []
        for s in n.src:  # q, k, v and the mask: their batch axes follow the output's, the last two stay
            if s.type.rank < 2:
                out.append(ident(s.type.rank))
                continue
            b = _batch_plan(L[:-2], s.type.rank, R - 2)
            if b is None:
                return None
            out.append(b + (s.type.rank - 2, s.type.rank - 1))
        return out

    def build(self, n: Node, L: Perm, src: Sequence[Node], lay: Sequence[Perm]) -> Node:
        return new_node(n, Op.ATTENTION, src, dict(n.attrs))

    def induce(self, n: Node, i: int, Q: Perm) -> Perm | None:
        r, R = len(Q), len(n.shape)
        if i > 2 or Q[-2:] != (r - 2, r - 1):
            return None
        off = R - r
        return tuple(range(off)) + tuple(a + off for a in Q[:-2]) + (R - 2, R - 1)

    def prefer(self, n: Node, P: Perm | None) -> Perm | None:
        if P is None or self.plan(n, P, None) is not None:
            return P
        R = len(P)
        L = tuple(a for a in P if a < R - 2) + (R - 2, R - 1)
        return L if self.plan(n, L, None) is not None else ident(R)


def normalising(n: Node) -> bool:
    """An op over one axis whose backend kernels want it last (layout kind "normalise" in the op
    registry: ONNX Softmax, LayerNormalization, RMSNormalization)."""
    return op_def(n.op).layout == "normalise"


class AxisOp(LayoutRule):
    """SOFTMAX, LAYER_NORM, RMS_NORM, SLICE, CONCAT: one `axis` attribute, remapped; other operands are
    scalars or per-axis vectors, or, for CONCAT, tensors in the same layout."""

    def plan(self, n: Node, L: Perm, avail: Avail) -> list[Perm | None] | None:
        if n.op is Op.CONCAT:
            return [L] * len(n.src)
        return [L] + [ident(s.type.rank) for s in n.src[1:]]

    def build(self, n: Node, L: Perm, src: Sequence[Node], lay: Sequence[Perm]) -> Node:
        attrs = dict(n.attrs)
        attrs["axis"] = respell(n.attrs["axis"], L.index(n.attrs["axis"] % len(L)), len(L))
        return new_node(n, n.op, src, attrs)

    def induce(self, n: Node, i: int, Q: Perm) -> Perm | None:
        return Q if n.op is Op.CONCAT or i == 0 else None

    def prefer(self, n: Node, P: Perm | None) -> Perm | None:
        if normalising(n):
            return move_last(P if P is not None else ident(len(n.shape)), [n.attrs["axis"] % len(n.shape)])
        return P

    def cost(self, n: Node, L: Perm) -> float:
        # Over any other axis than the last, ONNX Runtime's Softmax transposes in and out, and so does
        # the backend around LayerNormalization, which only normalises trailing axes.
        last = L[-1] == n.attrs["axis"] % len(L)
        return 0.0 if last or not normalising(n) else 2.0


class Reduce(LayoutRule):
    """REDUCE_*: with keepdims the axes are remapped; without, the reduced axes may sit anywhere in
    the operand's layout, and the canonical choice is last."""

    def _dropped(self, n: Node) -> tuple[list[int], list[int]]:
        axes = op_def(n.op).reduces(n)  # type: ignore[misc]
        return axes, [a for a in range(n.src[0].type.rank) if a not in axes]

    def plan(self, n: Node, L: Perm, avail: Avail) -> list[Perm | None] | None:
        axes, keep = self._dropped(n)
        if n.attrs.get("keepdims", False):
            return [L]
        want = tuple(keep[a] for a in L)
        for Q in avail[0] if avail else ():
            if tuple(a for a in Q if a not in axes) == want:
                return [Q]
        return [want + tuple(axes)]

    def build(self, n: Node, L: Perm, src: Sequence[Node], lay: Sequence[Perm]) -> Node:
        axes, _ = self._dropped(n)
        attrs = dict(n.attrs)
        attrs["axes"] = respell(n.attrs["axes"], sorted(lay[0].index(a) for a in axes), len(lay[0]))
        return new_node(n, n.op, src, attrs)

    def induce(self, n: Node, i: int, Q: Perm) -> Perm | None:
        axes, keep = self._dropped(n)
        if n.attrs.get("keepdims", False):
            return Q
        return tuple(keep.index(a) for a in Q if a not in axes)

    def prefer(self, n: Node, P: Perm | None) -> Perm | None:
        if n.attrs.get("keepdims", False):
            # The reduced axes are unit axes of the result, so putting them last is free for its users
            # and makes the operand reduce over its last axes.
            return move_last(P if P is not None else ident(len(n.shape)), self._dropped(n)[0])
        return P


class IndexMask(LayoutRule):
    """bool[r, c] with i rel j, transposed, is bool[c, r] with j rel' i."""

    FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}

    def plan(self, n: Node, L: Perm, avail: Avail) -> list[Perm | None] | None:
        return [(), ()]

    def build(self, n: Node, L: Perm, src: Sequence[Node], lay: Sequence[Perm]) -> Node:
        if L == (0, 1):
            return new_node(n, n.op, src, dict(n.attrs))
        attrs = {**n.attrs, "rel": self.FLIP[n.attrs["rel"]], "dims": tuple(reversed(n.attrs["dims"]))}
        return Node.at(n, Op.INDEX_MASK, (src[1], src[0]), attrs)


class SizeOf(LayoutRule):
    """DIM reads a size, which every layout of its operand has: it never asks for a transpose."""

    def plan(self, n: Node, L: Perm, avail: Avail) -> list[Perm | None] | None:
        return [None]

    def build(self, n: Node, L: Perm, src: Sequence[Node], lay: Sequence[Perm]) -> Node:
        ax = n.attrs["axis"] % len(lay[0])
        axis = respell(n.attrs["axis"], lay[0].index(ax), len(lay[0]))
        return new_node(n, Op.DIM, src, {**n.attrs, "axis": axis})
