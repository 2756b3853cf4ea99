"""Constant folding: every float tensor computed from weights alone becomes a weight itself.

GPT-2's tied unembedding Wᵀ, the transposes and concatenations of per-head projections that -O2
makes: they are computed once, at compile time, by the reference interpreter, and the graph reads
the result as a new PARAM ("folded.<i>"). A backend that would otherwise run each such op as a kernel
at load time gains (TVM ran each as an unscheduled kernel: 90 s of the first GPT-2 small compile,
against well under a second in numpy). ONNX Runtime folds initializers itself when a session
starts, so the ONNX pipeline leaves them be and keeps its files' weights under their own names.
Sizes stay in the graph: backends follow them symbolically.

`lazy=True` (what generation's ONNX files ask for, backends/onnx/lower.py `fold_weights`): each folded
weight is a LazyTensor, computed from the weights when the writer asks for it and released once
written, so folding never holds the model twice; and nothing that reads a weight also read unfolded
(a tied embedding: gathered from W_eᵀ, multiplied by W_e) is folded, which would store it twice. The
file's weights are then those onnxruntime computes with: it folds nothing when a session starts, which
cost as much memory again as the weights it folded, and seconds.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pseudoformer.ir import interpreter
from pseudoformer.ir.graph import Graph
from pseudoformer.ir.lazy_tensor import LazyTensor
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op
from pseudoformer.passes.rebuild import rebuild


def weight_only(nodes: list[Node]) -> set[int]:
    """ids of the nodes (in topological order) computed from weights and constants alone."""
    static: set[int] = set()
    for n in nodes:
        if n.op in (Op.PARAM, Op.CONST) or (n.src and n.op is not Op.INPUT and all(id(s) in static for s in n.src)):
            static.add(id(n))
    return static


def _reads(n: Node) -> set[int]:
    """ids of the PARAMs `n` is computed from."""
    seen: set[int] = set()
    params: set[int] = set()
    stack = [n]
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        if m.op is Op.PARAM:
            params.add(id(m))
        stack.extend(m.src)
    return params


def fold_constants(graph: Graph, weights: Mapping[str, np.ndarray], *,
                   lazy: bool = False) -> tuple[Graph, dict[str, np.ndarray]]:
    """The graph with weight-only tensors replaced by new PARAMs, and the weights it now takes."""
    nodes = graph.nodes()
    static = weight_only(nodes)
    c = graph.consumers()
    boundary = [n for n in nodes if id(n) in static and n.op not in (Op.PARAM, Op.CONST)
                and n.dtype.is_float and n.shape != ()
                and (c.is_output(n) or any(id(u) not in static for u in c.of(n)))]
    if lazy:
        # the PARAMs read as they are: a folded tensor computed from one would store it a second time
        kept = {id(s) for n in nodes if id(n) not in static for s in n.src if s.op is Op.PARAM}
        boundary = [n for n in boundary if not _reads(n) & kept]
    if not boundary:
        return graph, dict(weights)
    taken = {p.attrs["name"] for p in graph.params()}
    names = {}
    for i, n in enumerate(boundary):
        name = f"folded.{i}"
        while name in taken:
            name += "_"
        names[id(n)] = name
    if lazy:
        values = {names[id(n)]: _lazy(n, names[id(n)], weights) for n in boundary}
    else:
        sub = Graph([], [(names[id(n)], n) for n in boundary], {"entry": "weights"})
        values = interpreter.run(sub, {}, weights)
    out = {**{k: v if isinstance(v, LazyTensor) else np.asarray(v) for k, v in weights.items()}, **values}

    def replace(n: Node, _src: tuple[Node, ...]) -> Node | None:
        if id(n) in names:
            return Node.at(n, Op.PARAM, (), {"name": names[id(n)], "type": n.type})
        return None

    folded, _ = rebuild(graph, replace)
    used = {p.attrs["name"] for p in folded.params()}
    return folded, {k: v for k, v in out.items() if k in used}


def _lazy(n: Node, name: str, weights: Mapping[str, np.ndarray]) -> np.ndarray | LazyTensor:
    """`n`'s value from the weights, computed when loaded (now, if its shape is not known in numbers)."""
    sub = Graph([], [(name, n)], {"entry": "weights"})

    def compute() -> np.ndarray:
        return interpreter.run(sub, {}, weights)[name]

    if not all(isinstance(d, int) for d in n.shape):
        return compute()
    return LazyTensor(tuple(int(d) for d in n.shape), np.dtype(n.dtype.value), compute)
