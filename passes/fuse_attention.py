"""The attention-fusion pass: every head of Algorithm 4 becomes one ATTENTION op (see rules/attention.py).

It runs after CSE, so the causal mask each head rebuilds is one node by then and every head's
match sees the same mask; refusals are reported, not raised, because an unfused head is still
a correct program.
"""

from __future__ import annotations

from pseudoformer.ir import Graph
from pseudoformer.passes.rule import apply_rules
from pseudoformer.passes.rules.attention import RULE


def fuse_attention(graph: Graph, refusals: list | None = None) -> tuple[Graph, bool]:
    """Fuse every matching head; `refusals`, if given, collects (rule, reason, span) for each refused one."""
    return apply_rules(graph, [RULE], refusals)
