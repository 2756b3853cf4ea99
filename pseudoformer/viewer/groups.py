"""Groups: the algorithm-call scopes of the nodes (GPT2 → layers.3 → MHAttention → heads.0 → Attention).

A node's scope names the call path that made it, but not which call: GPT-2's layer calls
layer_norm twice under one scope `GPT2/layers.0/layer_norm`. Drawn as one box, the two calls
would pull the attention between them into a cycle. Separate calls are not connected inside
their scope (they meet only through their caller), so each scope's nodes are split into their
connected components, one group per call: `layer_norm`, `layer_norm#2`, in dataflow order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Group:
    key: str  # "GPT2/layers.0/layer_norm#2": the scope path, each segment with its call number if > 1
    label: str  # "layer_norm #2"
    parent: str | None  # None for a top-level group
    depth: int  # 1 for a top-level group


def assign_groups(items: Sequence[int], scope: Mapping[int, str],
                  src: Mapping[int, Sequence[int]]) -> dict[int, str]:
    """item → the key of its innermost group ("" for none), for `items` in dataflow order.

    `src[i]` are the items that i reads (others are ignored); a group's calls are told apart by
    the connected components of the edges between its own items.
    """
    neighbours: dict[int, list[int]] = {i: [] for i in items}
    for i in items:
        for s in src.get(i, ()):
            if s in neighbours and s != i:
                neighbours[i].append(s)
                neighbours[s].append(i)
    paths = {i: [p for p in scope[i].split("/") if p] for i in items}
    keys: dict[int, str] = {}
    stack: list[tuple[list[int], int, str]] = [(list(items), 0, "")]
    while stack:
        members, depth, prefix = stack.pop()
        by_segment: dict[str, list[int]] = {}
        for i in members:
            if len(paths[i]) <= depth:
                keys[i] = prefix
            else:
                by_segment.setdefault(paths[i][depth], []).append(i)
        for segment, inside in by_segment.items():
            for k, component in enumerate(_components(inside, neighbours)):
                name = segment if k == 0 else f"{segment}#{k + 1}"
                stack.append((component, depth + 1, f"{prefix}/{name}" if prefix else name))
    return keys


def _components(members: list[int], neighbours: Mapping[int, list[int]]) -> list[list[int]]:
    """Connected components of `members` under edges between members, each in members' order,
    ordered by their first member."""
    inside = set(members)
    component: dict[int, int] = {}
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
    out: list[list[int]] = [[] for _ in range(count)]
    for m in members:
        out[component[m]].append(m)
    return out


def group_table(keys: Sequence[str]) -> dict[str, Group]:
    """Every group that `keys` name, with their ancestors, parents before children."""
    groups: dict[str, Group] = {}
    for key in sorted({k for k in keys if k}, key=lambda k: (k.count("/"), k)):
        parts = key.split("/")
        for d in range(1, len(parts) + 1):
            sub = "/".join(parts[:d])
            if sub not in groups:
                seg = parts[d - 1]
                label = seg.replace("#", " #")
                groups[sub] = Group(sub, label, "/".join(parts[: d - 1]) or None, d)
    return dict(sorted(groups.items(), key=lambda kv: kv[1].depth))
