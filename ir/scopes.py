"""Algorithm calls: which call made each node, from the scopes the nodes record.

A node's scope names the call path that made it (`GPT2/layers.3/MHAttention/heads.0/Attention`),
but not which call: GPT-2's layer calls layer_norm twice under one scope `GPT2/layers.0/layer_norm`.
Separate calls are not connected inside their scope (they meet only through their caller), so each
scope's nodes, with those of the scopes under it, are split into their connected components, one
call per component: `layer_norm`, `layer_norm#2`, in dataflow order.

Two loops of one algorithm over the same variable give their iterations the same scope: BART's
encoder and decoder layers are both `BART/layers.1`, and the last encoder layer feeds the last
decoder layer's cross-attention, so the two are one component. But a call runs as one step: no path
leaves it and comes back. A component with such a path is split where the path leaves: each node
goes with the others from which the same number of leave-and-return trips still follow (below), so
the encoder layer, from which the path through the decoder's earlier layers leads back, and the
decoder layer, from which none does, come apart.

The HTML viewer draws each call as a group; the ONNX backend writes each as a local function
(backends/onnx/functions.py).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

Item = TypeVar("Item", bound=Hashable)


def assign_groups(items: Sequence[Item], scope: Mapping[Item, str],
                  src: Mapping[Item, Sequence[Item]]) -> dict[Item, str]:
    """item → the key of its innermost call ("" for none), for `items` in dataflow order.

    A key is the scope path with each segment's call number where it is above 1
    ("GPT2/layers.0/layer_norm#2"). `src[i]` are the items that i reads (others are ignored); a
    scope's calls are told apart by the connected components of the edges between its own items
    and those of the scopes under it.
    """
    neighbours: dict[Item, list[Item]] = {i: [] for i in items}
    readers: dict[Item, list[Item]] = {i: [] for i in items}
    for i in items:
        for s in src.get(i, ()):
            if s in neighbours and s != i:
                neighbours[i].append(s)
                neighbours[s].append(i)
                readers[s].append(i)
    order = {i: k for k, i in enumerate(items)}
    paths = {i: split_scope(scope[i]) for i in items}
    keys: dict[Item, str] = {}
    stack: list[tuple[list[Item], int, str]] = [(list(items), 0, "")]
    while stack:
        members, depth, prefix = stack.pop()
        by_segment: dict[str, list[Item]] = {}
        for i in members:
            if len(paths[i]) <= depth:
                keys[i] = prefix
            else:
                by_segment.setdefault(paths[i][depth], []).append(i)
        for segment, inside in by_segment.items():
            calls = [call for component in _components(inside, neighbours)
                     for piece in _one_way(component, items, order, readers)
                     for call in _components(piece, neighbours)]
            calls.sort(key=lambda c: order[c[0]])
            for k, component in enumerate(calls):
                name = segment if k == 0 else f"{segment}#{k + 1}"
                stack.append((component, depth + 1, f"{prefix}/{name}" if prefix else name))
    return keys


def split_scope(scope: str) -> list[str]:
    """A scope or call key as its segments: "GPT2/layers.0/layer_norm#2" → ["GPT2", "layers.0", "layer_norm#2"]."""
    return [p for p in scope.split("/") if p]


def scope_of(segment: str) -> str:
    """A key's segment without its call number: "layer_norm#2" → "layer_norm"."""
    return segment.split("#", 1)[0]


def _components(members: list[Item], neighbours: Mapping[Item, list[Item]]) -> list[list[Item]]:
    """Connected components of `members` under edges between members, each in members' order,
    ordered by their first member."""
    inside = set(members)
    component: dict[Item, int] = {}
    count = 0
    for start in members:
        if start in component:
            continue
        component[start] = count
        todo = [start]
        while todo:
            for m in neighbours[todo.pop()]:
                if m in inside and m not in component:
                    component[m] = count
                    todo.append(m)
        count += 1
    out: list[list[Item]] = [[] for _ in range(count)]
    for m in members:
        out[component[m]].append(m)
    return out


def _one_way(members: list[Item], items: Sequence[Item], order: Mapping[Item, int],
             readers: Mapping[Item, list[Item]]) -> list[list[Item]]:
    """`members` split so that no path leaves a piece and comes back to it; one piece if none does.

    For a member m, trips(m) is the most times a path from m leaves the members and comes back. An
    edge between members never raises it, and leaving and returning lowers it by one, so the members
    of one count form pieces that no path leaves and re-enters. The pieces come in dataflow order.
    """
    inside = set(members)
    lo, hi = order[members[0]], order[members[-1]]  # nothing after the last member leads back to them
    trips: dict[Item, int] = {}  # for a member, trips; for another node, the most returns still ahead
    for i in reversed(items[lo:hi + 1]):
        best = 0 if i in inside else -1  # -1: no path back to the members
        for r in readers[i]:
            if order[r] <= hi:
                ahead = trips[r] + 1 if r in inside and i not in inside else trips[r]
                best = max(best, ahead)
        trips[i] = best
    if all(trips[m] == 0 for m in members):
        return [members]
    by_count: dict[int, list[Item]] = {}
    for m in members:
        by_count.setdefault(trips[m], []).append(m)
    return [by_count[c] for c in sorted(by_count, reverse=True)]
