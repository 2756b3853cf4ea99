"""What a post-grad rule is (inductor_rules/), and how one builds nodes inductor can lower.

A rule names the operators it starts from (`targets`), matches a node to a match object, to the reason it
refuses (a str: the formula's start is there, a check failed), or to None (not its formula), and rewrites the
matched node in the graph: new nodes inserted before it, its uses moved to the replacement, and it and what
it alone read erased (`erase`; not the graph's dead-code elimination, which would also judge nodes no rule
touched).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch._guards import detect_fake_mode

aten = torch.ops.aten


@dataclass(frozen=True)
class FxRule:
    name: str
    targets: tuple[Any, ...]  # OpOverloads the matched node calls
    match: Callable[[torch.fx.Node], Any]  # → a match, why not (str), or None
    rewrite: Callable[[torch.fx.Graph, torch.fx.Node, Any], None]


def emit(graph: torch.fx.Graph, like: torch.fx.Node, target: Any, *args: Any, **kwargs: Any) -> torch.fx.Node:
    """`target(*args, **kwargs)` as a node before `like`, its `val` computed on the fake tensors the graph's
    nodes carry (inductor's lowering reads a node's val for its shape, stride and dtype) and `like`'s stack
    trace kept, so that inductor's kernel names and comments still say where it came from."""
    def fake(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            return a.meta["val"]
        if isinstance(a, (list, tuple)):
            return type(a)(fake(x) for x in a)
        return a

    mode = detect_fake_mode([like.meta["val"]])
    with mode:
        val = target(*fake(args), **kwargs)
    with graph.inserting_before(like):
        node = graph.call_function(target, args, kwargs)
    node.meta["val"] = val
    if "stack_trace" in like.meta:
        node.meta["stack_trace"] = like.meta["stack_trace"]
    return node


def zeros_read_once(n: Any) -> bool:
    """n is `full(shape, 0)` read by one node: a tensor of zeros made for its reader alone."""
    return (isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target is aten.full.default
            and n.args[1] == 0 and len(n.users) == 1)


def shape(n: torch.fx.Node) -> tuple[int, ...]:
    return tuple(n.meta["val"].shape)


def erase(graph: torch.fx.Graph, *nodes: torch.fx.Node) -> None:
    """Erase `nodes` in order, each once nothing reads it (a replaced node, then what it alone read)."""
    for n in nodes:
        if not n.users:
            graph.erase_node(n)
