"""Algorithm calls: which call made each node, from the scopes the nodes record.

A node's scope names the call path that made it (`GPT2/layers.3/MHAttention/heads.0/Attention`),
but not which call: GPT-2's layer calls layer_norm twice under one scope `GPT2/layers.0/layer_norm`.
Separate calls are not connected inside their scope (they meet only through their caller), so each
scope's nodes, with those of the scopes under it, are split into their connected components, one
call per component: `layer_norm`, `layer_norm#2`, in dataflow order. The HTML viewer draws each call
as a group; the ONNX backend writes each as a local function (backends/onnx/functions.py).
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
    for i in items:
        for s in src.get(i, ()):
            if s in neighbours and s != i:
                neighbours[i].append(s)
                neighbours[s].append(i)
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
            for k, component in enumerate(_components(inside, neighbours)):
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
