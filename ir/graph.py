"""A graph: ordered inputs, named outputs, and the nodes between them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op


@dataclass
class Graph:
    """A model: `inputs` in signature order, `outputs` as (name, node) in signature order.

    `meta` records what the graph was made from (entry algorithm, source file, hyperparameters,
    the run-time dims and their meaning) for printers and backends.
    """

    inputs: list[Node]
    outputs: list[tuple[str, Node]]
    meta: dict[str, Any] = field(default_factory=dict)

    def nodes(self) -> list[Node]:
        """Every node reachable from the outputs (and every input), in a deterministic topological order."""
        order: list[Node] = []
        seen: set[int] = set()
        for root in [*self.inputs, *(n for _, n in self.outputs)]:
            for n in root.walk():
                if id(n) not in seen:
                    seen.add(id(n))
                    order.append(n)
        return order

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes())

    def params(self) -> list[Node]:
        """PARAM nodes, one per distinct name, in order of first use."""
        out: dict[str, Node] = {}
        for n in self.nodes():
            if n.op is Op.PARAM:
                out.setdefault(n.attrs["name"], n)
        return list(out.values())

    def input(self, name: str) -> Node:
        for n in self.inputs:
            if n.attrs["name"] == name:
                return n
        raise KeyError(name)
