"""What a pass is (Pass) and what it may know beyond the graph (PassContext); the manager (manager.py)
runs passes by name, in pipelines."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pseudoformer.ir import Graph, Node

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
    refusals: list[tuple[Any, ...]] = field(default_factory=list)  # (rule, reason, span, scope) of fusions
    derived: dict[int, Any] = field(default_factory=dict)  # results several passes share (the decoder split)


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Graph, PassContext], tuple[Graph, bool]]
    doc: str
    fixed_point: bool = False


def plain(fn: Callable[[Graph], tuple[Graph, bool]]) -> Callable[[Graph, PassContext], tuple[Graph, bool]]:
    return lambda graph, ctx: fn(graph)


def with_refusals(fn: Callable[..., tuple[Graph, bool]]) -> Callable[[Graph, PassContext], tuple[Graph, bool]]:
    return lambda graph, ctx: fn(graph, ctx.refusals)
