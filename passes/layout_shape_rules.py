"""Layout rules for the ops that add, drop, merge or pick axes: UNSQUEEZE, SQUEEZE, GATHER, RESHAPE.

See layout_rules.py for what a rule answers; these differ from the rest in that the operand has
other axes than the result, so a layout of one is translated, axis by axis, into a layout of the other.
"""

from __future__ import annotations

from collections.abc import Sequence

from pseudoformer.ir import Dim, Node, Op
from pseudoformer.passes.layout_rules import Avail, LayoutRule, Perm, ident, new_node, norm_axes, respell


class Unsqueeze(LayoutRule):
    def _split(self, n: Node) -> tuple[list[int], list[int]]:
        R = len(n.shape)
        ins = norm_axes(n.attrs["axes"], R)
        return ins, [a for a in range(R) if a not in ins]

    def plan(self, n: Node, L: Perm, avail: Avail) -> list[Perm | None] | None:
        ins, keep = self._split(n)
        return [tuple(keep.index(a) for a in L if a not in ins)]

    def build(self, n: Node, L: Perm, src: Sequence[Node], lay: Sequence[Perm]) -> Node:
        ins, _ = self._split(n)
        axes = respell(n.attrs["axes"], sorted(L.index(a) for a in ins), len(L))
        return new_node(n, Op.UNSQUEEZE, src, {**n.attrs, "axes": axes})

    def induce(self, n: Node, i: int, Q: Perm) -> Perm | None:
        ins, keep = self._split(n)
        L = [keep[a] for a in Q]
        for a in ins:
            L.insert(a, a)
        return tuple(L)

    def prefer(self, n: Node, P: Perm | None) -> Perm | None:
        return P


class Squeeze(LayoutRule):
    def _split(self, n: Node) -> tuple[list[int], list[int]]:
        r = n.src[0].type.rank
        sq = norm_axes(n.attrs["axes"], r)
        return sq, [a for a in range(r) if a not in sq]

    def plan(self, n: Node, L: Perm, avail: Avail) -> list[Perm | None] | None:
        sq, keep = self._split(n)
        want = tuple(keep[a] for a in L)
        for Q in avail[0] if avail else ():
            if tuple(a for a in Q if a not in sq) == want:
                return [Q]
        out = list(want)
        for a in sq:  # the unit axes go back where they were; anywhere would do
            out.insert(a, a)
        return [tuple(out)]

    def build(self, n: Node, L: Perm, src: Sequence[Node], lay: Sequence[Perm]) -> Node:
        sq, _ = self._split(n)
        axes = respell(n.attrs["axes"], sorted(lay[0].index(a) for a in sq), len(lay[0]))
        return new_node(n, Op.SQUEEZE, src, {**n.attrs, "axes": axes})

    def induce(self, n: Node, i: int, Q: Perm) -> Perm | None:
        sq, keep = self._split(n)
        return tuple(keep.index(a) for a in Q if a not in sq)

    def prefer(self, n: Node, P: Perm | None) -> Perm | None:
        return P


class Gather(LayoutRule):
    """GATHER(data, idx, axis) puts idx's axes in place of data's axis: a layout that keeps them
    together is a layout of data (with the block as its axis) and of idx (the order inside the block).
    The embedding's GATHER(W_e, x, axis=1) in [d, b, s], wanted as [b, s, d], becomes GATHER(W_eᵀ, x, axis=0)."""

    def _block(self, n: Node) -> tuple[int, int]:
        ax = n.attrs["axis"] % n.src[0].type.rank
        return ax, n.src[1].type.rank

    def plan(self, n: Node, L: Perm, avail: Avail) -> list[Perm | None] | None:
        ax, ri = self._block(n)
        block = set(range(ax, ax + ri))
        pos = [i for i, a in enumerate(L) if a in block]
        if ri == 0:
            pos_at = next((i for i, a in enumerate(L) if a >= ax), len(L))
            data = [a if a < ax else a + 1 for a in L]
            data.insert(pos_at, ax)
            return [tuple(data), ()]
        if pos != list(range(pos[0], pos[0] + ri)):
            return None
        data: list[int] = []
        for a in L:
            if a in block:
                if a == L[pos[0]]:
                    data.append(ax)
            else:
                data.append(a if a < ax else a - ri + 1)
        return [tuple(data), tuple(L[p] - ax for p in pos)]

    def build(self, n: Node, L: Perm, src: Sequence[Node], lay: Sequence[Perm]) -> Node:
        ax, _ = self._block(n)
        axis = respell(n.attrs["axis"], lay[0].index(ax), len(lay[0]))
        return new_node(n, Op.GATHER, src, {**n.attrs, "axis": axis})

    def induce(self, n: Node, i: int, Q: Perm) -> Perm | None:
        ax, ri = self._block(n)
        if i == 1:
            return tuple(range(ax)) + tuple(a + ax for a in Q) + tuple(range(ax + ri, len(n.shape)))
        out: list[int] = []
        for a in Q:
            if a == ax:
                out.extend(range(ax, ax + ri))
            else:
                out.append(a if a < ax else a + ri - 1)
        return tuple(out)

    def prefer(self, n: Node, P: Perm | None) -> Perm | None:
        if P is None or self.plan(n, P, None) is not None:
            return P
        ax, ri = self._block(n)
        block = range(ax, ax + ri)
        last = max(i for i, a in enumerate(P) if a in block)  # gather the block where it ends
        rest = [a for a in P if a not in block]
        at = sum(1 for a in P[:last] if a not in block)
        return tuple(rest[:at]) + tuple(block) + tuple(rest[at:])


def reshape_groups(src: Sequence[Dim], dst: Sequence[Dim]) -> list[tuple[list[int], list[int]]] | None:
    """Split a reshape into groups of source axes that become groups of target axes (a merge, a
    split, or one axis kept), unit axes dropped or added on their own; None if it does not split so."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(src) or j < len(dst):
        s_one, d_one = i < len(src) and src[i] == 1, j < len(dst) and dst[j] == 1
        if s_one and not d_one:
            groups.append(([i], []))
            i += 1
        elif d_one and not s_one:
            groups.append(([], [j]))
            j += 1
        elif i >= len(src) or j >= len(dst):
            return None
        elif src[i] == dst[j]:
            groups.append(([i], [j]))
            i, j = i + 1, j + 1
        else:
            si, dj, ps, pd = [i], [j], src[i], dst[j]
            i, j = i + 1, j + 1
            while ps != pd:
                if not (isinstance(ps, int) and isinstance(pd, int)) or ps == 0 or pd == 0:
                    return None
                if ps < pd and i < len(src) and isinstance(src[i], int):
                    ps, i = ps * src[i], i + 1
                    si.append(i - 1)
                elif pd < ps and j < len(dst) and isinstance(dst[j], int):
                    pd, j = pd * dst[j], j + 1
                    dj.append(j - 1)
                else:
                    return None
            groups.append((si, dj))
    return groups


class Reshape(LayoutRule):
    """A reshape that only merges or splits neighbouring axes absorbs any layout that moves those
    groups whole: [b, H·d, s] → [b, H, d, s] is, row-major, [b, s, H·d] → [b, s, H, d]."""

    def plan(self, n: Node, L: Perm, avail: Avail) -> list[Perm | None] | None:
        groups = reshape_groups(n.src[0].shape, n.shape)
        if groups is None:
            return super().plan(n, L, avail)
        of = {a: g for g, (_, d) in enumerate(groups) for a in d}
        order: list[int] = []
        for a in L:
            if not order or order[-1] != of[a]:
                order.append(of[a])
        if len(order) != len(set(order)) or [a for g in order for a in groups[g][1]] != list(L):
            return None
        src = [a for g in order for a in groups[g][0]] + [a for s, d in groups if not d for a in s]
        return [tuple(src)]

    def build(self, n: Node, L: Perm, src: Sequence[Node], lay: Sequence[Perm]) -> Node:
        shape = tuple(n.shape[a] for a in L)
        if tuple(n.attrs["shape"]) == shape:
            shape = n.attrs["shape"]
        x = src[0]
        if x is not n.src[0]:
            # The layout may have turned the operand into a view already: view its source instead,
            # or nothing at all, so that views neither stack nor linger as no-ops.
            if x.op is Op.RESHAPE:
                x = x.src[0]
            if x.shape == shape:
                return x
        return new_node(n, Op.RESHAPE, [x], {**n.attrs, "shape": shape})

    def induce(self, n: Node, i: int, Q: Perm) -> Perm | None:
        groups = reshape_groups(n.src[0].shape, n.shape)
        if groups is None:
            return None
        of = {a: g for g, (s, _) in enumerate(groups) for a in s}
        order: list[int] = []
        for a in Q:
            if not order or order[-1] != of[a]:
                order.append(of[a])
        if len(order) != len(set(order)):
            return None
        order += [g for g, (s, _) in enumerate(groups) if not s]
        return tuple(a for g in order for a in groups[g][1])

    def prefer(self, n: Node, P: Perm | None) -> Perm | None:
        if P is None or self.plan(n, P, None) is not None:
            return P
        groups = reshape_groups(n.src[0].shape, n.shape)
        if groups is None:
            return ident(len(P))
        # Keep the group of the wanted innermost axis innermost: that is what makes rows contiguous.
        kept = sorted((g for g in groups if g[1]), key=lambda g: max(P.index(a) for a in g[1]))
        return tuple(a for _, d in kept for a in d)
