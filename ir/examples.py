"""Each op's example (OpDef.example) as a graph with weights, and its inputs at any batch and length.

The registry's tests run the typing rule, the interpreter and the decomposition on these graphs; each
backend's tests lower them and compare with the interpreter. `every_example` puts all of them in one
graph (names prefixed by the op), for a backend whose compiles are too slow to make one per op.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pseudoformer.ir.graph import Graph
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import OPS, Op
from pseudoformer.ir.ops.registry import ExampleMaker, Values
from pseudoformer.ir.types import Dim, DType, TensorType

PAST = 3  # the size of the "past" dim (a cache's earlier positions)


@dataclass
class OpExample:
    graph: Graph
    params: dict[str, np.ndarray]
    values: dict[str, Values | None] = field(default_factory=dict)  # each input's draw, by name

    def feeds(self, batch: int = 2, seq: int = 5, seed: int = 0) -> dict[str, np.ndarray]:
        """The inputs at this batch size and sequence length."""
        rng = np.random.default_rng(seed)
        sizes = {"batch": batch, "seq": seq, "past": PAST}
        out = {}
        for n in self.graph.inputs:
            shape = tuple(sizes[d] if isinstance(d, str) else d for d in n.type.shape)
            out[n.attrs["name"]] = _draw(rng, n.dtype, shape, self.values[n.attrs["name"]])
        return out


def example(op: Op) -> OpExample:
    """The graph of `op`'s example, its outputs named <op>_<i>."""
    return _build([op], prefix=False)


def every_example(ops: Iterable[Op] | None = None) -> OpExample:
    """One graph of the examples of `ops` (all ops by default), leaves named <op>.<name>."""
    return _build(list(OPS) if ops is None else list(ops), prefix=True)


def _build(ops: list[Op], prefix: bool) -> OpExample:
    make = _Maker()
    outputs: list[tuple[str, Node]] = []
    for op in ops:
        recipe = OPS[op].example
        if recipe is None:
            raise ValueError(f"op {op.value} has no example")
        make.prefix = f"{op.value}." if prefix else ""
        outputs += [(f"{op.value}_{i}", n) for i, n in enumerate(recipe(make))]
    graph = Graph(list(make.inputs.values()), outputs, {"entry": "Examples"})
    return OpExample(graph, make.params, make.values)


class _Maker(ExampleMaker):
    def __init__(self) -> None:
        self.prefix = ""
        self.inputs: dict[str, Node] = {}
        self.values: dict[str, Values | None] = {}
        self.params: dict[str, np.ndarray] = {}
        self.param_nodes: dict[str, Node] = {}
        self.rng = np.random.default_rng(1)

    def __call__(self, op: Op, *src: Any, **attrs: Any) -> Node:
        return Node(op, tuple(src), attrs)

    def input(self, name: str, dtype: DType, *shape: Dim, values: Values | None = None) -> Node:
        name = self.prefix + name
        if name not in self.inputs:  # asked for twice: the same input
            self.inputs[name] = Node(Op.INPUT, (), {"name": name, "type": TensorType(dtype, tuple(shape))})
            self.values[name] = values
        return self.inputs[name]

    def param(self, name: str, dtype: DType, *shape: int, values: Values | None = None) -> Node:
        name = self.prefix + name
        if name not in self.param_nodes:  # asked for twice: a tied weight
            self.param_nodes[name] = Node(Op.PARAM, (), {"name": name, "type": TensorType(dtype, tuple(shape))})
            self.params[name] = _draw(self.rng, dtype, tuple(shape), values)
        return self.param_nodes[name]


def _draw(rng: np.random.Generator, dtype: DType, shape: tuple[int, ...], values: Values | None) -> np.ndarray:
    if values is not None:
        a = np.asarray(values(rng, shape))
    elif dtype is DType.bool:
        a = rng.random(shape) < 0.5
    elif dtype is DType.uint8:
        a = rng.integers(0, 256, shape)
    elif dtype is DType.int64:
        a = rng.integers(-8, 8, shape)
    else:
        a = rng.standard_normal(shape)
    return a.astype(np.dtype(dtype.value))
