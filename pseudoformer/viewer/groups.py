"""Groups: the algorithm calls of the nodes (GPT2 → layers.3 → MHAttention → heads.0 → Attention).

A node's scope names the call path that made it, but not which call: GPT-2's layer calls
layer_norm twice under one scope `GPT2/layers.0/layer_norm`. Drawn as one box, the two calls
would pull the attention between them into a cycle, so each call is its own group
(`layer_norm`, `layer_norm#2`), as ir/scopes.py tells them apart; the ONNX backend's local
functions are the same calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Group:
    key: str  # "GPT2/layers.0/layer_norm#2": the scope path, each segment with its call number if > 1
    label: str  # "layer_norm #2"
    parent: str | None  # None for a top-level group
    depth: int  # 1 for a top-level group


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
