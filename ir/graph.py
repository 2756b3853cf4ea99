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

    `meta` records what the graph was made from, as the frontend elaborated it: the entry algorithm,
    its source file, the hyperparameters, the run-time dims and their meaning, the limits on them.
    Passes carry it over unchanged; what a pass needs to tell another goes through the PassContext.
    """

    inputs: list[Node]
    outputs: list[tuple[str, Node]]
    meta: dict[str, Any] = field(default_factory=dict)

    def nodes(self) -> list[Node]:
        """Every node reachable from the outputs (and every input), in a deterministic topological order."""
        # One walk shared by every root: walking each output afresh re-visited what the earlier ones
        # reached, quadratic in the layers for a decoder step's L present keys and values.
        order: list[Node] = []
        seen: set[int] = set()
        for root in [*self.inputs, *(n for _, n in self.outputs)]:
            order.extend(root.walk(seen))
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

    def consumers(self) -> Consumers:
        """Who reads each node: id(node) → [(user, operand index)], in topological order of the users;
        graph outputs are in `Consumers.outputs`."""
        return Consumers(self)

    def input(self, name: str) -> Node:
        for n in self.inputs:
            if n.attrs["name"] == name:
                return n
        raise KeyError(name)


class Consumers:
    """The users of every node of a graph, built once: the one consumer map passes and backends share."""

    def __init__(self, graph: Graph) -> None:
        self.users: dict[int, list[tuple[Node, int]]] = {}
        for n in graph.nodes():
            for i, s in enumerate(n.src):
                self.users.setdefault(id(s), []).append((n, i))
        self.outputs: dict[int, list[str]] = {}
        for name, n in graph.outputs:
            self.outputs.setdefault(id(n), []).append(name)

    def of(self, n: Node) -> list[Node]:
        """The nodes that read n (a node that reads it twice, twice)."""
        return [u for u, _ in self.users.get(id(n), [])]

    def slots(self, n: Node) -> list[tuple[Node, int]]:
        return self.users.get(id(n), [])

    def is_output(self, n: Node) -> bool:
        return id(n) in self.outputs

    def count(self, n: Node) -> int:
        """Operand slots and graph outputs that read n."""
        return len(self.users.get(id(n), [])) + len(self.outputs.get(id(n), []))

    def only_user(self, n: Node, user: Node) -> bool:
        """Whether `user` is the one reader of n (in one slot) and n is no graph output."""
        return [id(u) for u in self.of(n)] == [id(user)] and not self.is_output(n)
