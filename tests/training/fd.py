"""Central finite differences in float64 on the interpreter: the oracle every VJP rule is checked against."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pseudoformer.ir import DType, Graph, Node, Op, TensorType
from pseudoformer.ir.interpreter import run
from pseudoformer.passes.rebuild import clone


def to_float64(graph: Graph) -> Graph:
    """The same graph computing in float64: float32 inputs, params, constants and casts widened."""
    memo: dict[int, Node] = {}

    def wide(t: TensorType) -> TensorType:
        return TensorType(DType.float64, t.shape) if t.dtype is DType.float32 else t

    for n in graph.nodes():
        src = tuple(memo[id(s)] for s in n.src)
        attrs = dict(n.attrs)
        if n.op in (Op.INPUT, Op.PARAM):
            attrs["type"] = wide(attrs["type"])
        if attrs.get("dtype") is DType.float32:
            attrs["dtype"] = DType.float64
        memo[id(n)] = Node(n.op, src, attrs, span=n.span, scope=n.scope) if n.op is not Op.GET else clone(n, src)
    return Graph([memo[id(n)] for n in graph.inputs], [(k, memo[id(n)]) for k, n in graph.outputs], dict(graph.meta))


def wide(values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in values.items()}


def numeric_grad(graph: Graph, inputs: Mapping[str, np.ndarray], params: Mapping[str, np.ndarray], name: str,
                 eps: float = 1e-6, probes: int | None = None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(the flat indices probed, ∂mean(loss)/∂param[i] there) by central differences in float64."""
    g64, inputs, params = to_float64(graph), wide(inputs), wide(params)
    base = params[name]
    flat = np.arange(base.size)
    if probes is not None and probes < base.size:
        flat = np.random.default_rng(seed).choice(base.size, probes, replace=False)
    out = np.empty(len(flat))
    for j, i in enumerate(flat):
        vals = []
        for sign in (1, -1):
            p = base.copy().reshape(-1)
            p[i] += sign * eps
            loss = run(g64, inputs, {**params, name: p.reshape(base.shape)})[g64.outputs[0][0]]
            vals.append(float(np.mean(loss)))
        out[j] = (vals[0] - vals[1]) / (2 * eps)
    return flat, out
