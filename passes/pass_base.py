"""What a pass is (Pass) and what it may know beyond the graph (PassContext); the manager (manager.py)
runs passes by name, in pipelines."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pseudoformer.ir import Graph, Node
from pseudoformer.passes.rule import Rule, apply_rules

if TYPE_CHECKING:
    from pseudoformer.passes.quantize import QuantizeOptions


@dataclass
class PassContext:
    """What passes beyond pure rewrites need to know: the target backend, the weights, the options."""

    accepts: Callable[[Node], bool] | None = None  # the backend's lowerings (decompose keeps what it accepts)
    weights: dict[str, np.ndarray] | None = None  # read by constant folding and quantization, which add weights
    lazy: bool = False  # the weights those passes add may be LazyTensors, computed when a writer loads them
    quantize: QuantizeOptions | None = None  # how the quantize pass quantizes the weights
    output: str | None = None  # the output that last_position cuts
    positions: str | None = None  # ... along this run-time dim
    decoder_input: str | None = None  # the token input of a decoder (incremental derivation)
    # a decode step whose cache lives in buffers GroupQueryAttention appends to (CompileOptions.kv_buffers): the
    # kernel is then taken in float16 too (passes/rules/group_query_attention.py)
    buffered_cache: bool = False
    refusals: list[tuple[Any, ...]] = field(default_factory=list)  # (rule, reason, span, scope) of fusions
    fired: Counter[str] = field(default_factory=Counter)  # rule name → the matches it rewrote (Inductor's counters)
    derived: dict[int, Any] = field(default_factory=dict)  # results several passes share (the decoder split)


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Graph, PassContext], tuple[Graph, bool]]
    doc: str
    fixed_point: bool = False

    @classmethod
    def from_rules(cls, name: str, doc: str, *walks: list[Rule]) -> Pass:
        """The pass that walks the graph once per list of rules (passes/rule.py), in order, each walk trying its
        rules at every node; the refusals and the rules that fired go to the PassContext. A second walk is for a
        rule that counts uses in the graph the first one made."""

        def run(graph: Graph, ctx: PassContext) -> tuple[Graph, bool]:
            changed = False
            for rules in walks:
                graph, did = apply_rules(graph, rules, ctx.refusals, ctx.fired)
                changed = changed or did
            return graph, changed

        return cls(name, run, doc)

    def __call__(self, graph: Graph, refusals: list | None = None) -> tuple[Graph, bool]:
        """The pass alone, on a fresh context (tests); the fusions' refusals appended to `refusals`."""
        ctx = PassContext()
        out = self.run(graph, ctx)
        if refusals is not None:
            refusals.extend(ctx.refusals)
        return out


def plain(fn: Callable[[Graph], tuple[Graph, bool]]) -> Callable[[Graph, PassContext], tuple[Graph, bool]]:
    return lambda graph, ctx: fn(graph)
