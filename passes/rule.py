"""Rewrite rules: each matches a formula in the graph, checks it may rewrite it, and builds the replacement.

As in onnxscript's rewriter, a rule lives in its own module (passes/rules/), opens with the formula it
matches, and says why it refused when the check fails — `pseudoformer inspect --refusals` shows those
reasons. A rule sees each node with its operands already rewritten and the graph's use counts.

A rewrite returns the node's replacement, or (replacement, {id(node): replacement}) when the fused op
also stands for nodes the walk reaches later (a skip norm, matched at the residual sum, is also the norm
that reads it): those are replaced when they come, whatever their operands have become.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pseudoformer.ir import Graph, Node
from pseudoformer.ir.graph import Consumers
from pseudoformer.passes.rebuild import rebuild


@dataclass
class Context:
    """What a rule may ask about the graph being rewritten."""

    consumers: Consumers  # of the input graph
    origins: dict[int, Node] = field(default_factory=dict)  # id(rebuilt node) → its input-graph node
    refusals: list[tuple[Any, ...]] = field(default_factory=list)  # (rule, reason, span, scope)

    def used_once(self, n: Node) -> bool:
        """Whether only one operand slot reads `n` (a rebuilt node or one of the input graph)."""
        old = self.origins.get(id(n), n)
        # A node a rule just created is not in the input graph: nothing else can use it yet.
        return self.consumers.count(old) <= 1


@dataclass(frozen=True)
class Rule:
    name: str
    # match(node, src, ctx) → a match object or None; check(match, ctx) → None or why not; rewrite → new node
    match: Callable[[Node, tuple[Node, ...], Context], Any]
    rewrite: Callable[[Any, Node], Node | tuple[Node, dict[int, Node]]]
    check: Callable[[Any, Context], str | None] = lambda m, ctx: None


def apply_rules(graph: Graph, rules: list[Rule], refusals: list | None = None,
                fired: Counter[str] | None = None) -> tuple[Graph, bool]:
    """One walk of the graph trying `rules` at each node; `refusals` collects (rule, reason, span, scope) and
    `fired` counts each rule's rewrites."""
    ctx = Context(graph.consumers())
    later: dict[int, Node] = {}  # id(input-graph node) → what an earlier rewrite replaced it with

    def visit(n: Node, src: tuple[Node, ...]) -> Node | None:
        if id(n) in later:
            return later.pop(id(n))
        for r in rules:
            m = r.match(n, src, ctx)
            if m is None:
                continue
            why = r.check(m, ctx)
            if why is not None:
                ctx.refusals.append((r.name, why, n.span, n.scope))
                continue
            out = r.rewrite(m, n)
            if fired is not None:
                fired[r.name] += 1
            if isinstance(out, tuple):
                out, also = out
                later.update(also)
            return out
        return None

    out = rebuild(graph, visit, ctx.origins)
    if refusals is not None:
        refusals.extend(ctx.refusals)
    return out
