"""Every op's VJP (its own rule, or its decomposition's) against central finite differences in float64 on
the interpreter, over the hand-built graphs that use every op of the registry (tests/backends/onnx_cases.py).

Each float output y of those graphs becomes a loss ½Σy², whose gradient with respect to the float inputs
and parameters (the cotangent y pulled back through the op) is compared with the differences of the loss."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.ir import DType, Graph, Node, Op
from pseudoformer.ir.interpreter import run
from pseudoformer.ir.ops import OPS
from pseudoformer.passes.autodiff import GRAD, QUANTIZED, AutodiffError, gradients
from tests.backends.onnx_cases import fused, fused_inputs, fused_params, structure, structure_inputs
from tests.training.fd import numeric_grad, to_float64, wide

# Where a function has no derivative a difference may straddle: its kinks and jumps are kept away from
# the probes by the inputs' values (continuous standard normals), except for these, whose outputs are
# piecewise constant (their gradient is zero, and so is almost every difference).
GRAPHS = {"structure": (structure, structure_inputs, dict), "fused": (fused, fused_inputs, fused_params)}
NO_DERIVATIVE = {"cached", "present_k", "present_v", "cached_window"}  # inference only: refused, tested below


def _cases() -> list[tuple[str, str]]:
    out = []
    for g, (make, _, _) in GRAPHS.items():
        for name, n in make().outputs:
            if n.dtype.is_float and name not in NO_DERIVATIVE:
                out.append((g, name))
    return out


def _loss_of(graph: Graph, name: str) -> Graph:
    y = dict(graph.outputs)[name]
    sq = Node(Op.MUL, (y, y))
    half = Node(Op.MUL, (Node(Op.REDUCE_SUM, (sq,), {"axes": list(range(y.type.rank)), "keepdims": False}),
                         Node(Op.CONST, (), {"value": 0.5, "dtype": y.dtype})))
    return Graph(list(graph.inputs), [("loss", half)], graph.meta)


@pytest.mark.parametrize(("which", "name"), _cases())
def test_each_vjp_agrees_with_finite_differences(which: str, name: str) -> None:
    make, make_inputs, make_params = GRAPHS[which]
    graph = _loss_of(make(), name)
    inputs, params = make_inputs(2, 5), make_params()
    quantized = {s.attrs["name"] for n in graph.nodes() if n.op in QUANTIZED for s in n.src if s.op is Op.PARAM}
    train = [p.attrs["name"] for p in graph.params() if p.dtype.is_float and p.attrs["name"] not in quantized]
    wrt_inputs = [n.attrs["name"] for n in graph.inputs if n.dtype is DType.float32]
    g = gradients(graph, train, inputs=wrt_inputs)
    got = run(to_float64(g), wide(inputs), wide(params))
    checked = 0
    for k in [*train, *wrt_inputs]:
        if GRAD + k not in got:
            continue
        values = inputs if k in inputs else params
        idx, fd = _fd(graph, inputs, params, k, values)
        ours = got[GRAD + k].reshape(-1)[idx]
        np.testing.assert_allclose(ours, fd, rtol=1e-6, atol=1e-6, err_msg=f"{name}: ∂/∂{k}")
        checked += 1
    assert checked


def _fd(graph: Graph, inputs: dict, params: dict, k: str, values: dict) -> tuple[np.ndarray, np.ndarray]:
    if k in params:
        return numeric_grad(graph, inputs, params, k, probes=12)
    # an input: the same differences, the input made a parameter of a graph that reads it by name
    swapped = Graph([n for n in graph.inputs if n.attrs["name"] != k], graph.outputs, graph.meta)
    as_param = _input_as_param(swapped, k)
    rest = {n: v for n, v in inputs.items() if n != k}
    return numeric_grad(as_param, rest, {**params, k: values[k]}, k, probes=12)


def _input_as_param(graph: Graph, k: str) -> Graph:
    def swap(n: Node, src: tuple[Node, ...]) -> Node | None:
        if n.op is Op.INPUT and n.attrs["name"] == k:
            return Node(Op.PARAM, (), dict(n.attrs))
        return None

    memo: dict[int, Node] = {}
    for n in graph.nodes():
        src = tuple(memo[id(s)] for s in n.src)
        new = swap(n, src)
        memo[id(n)] = new or (n if all(a is b for a, b in zip(src, n.src, strict=True))
                              else Node(n.op, src, dict(n.attrs), span=n.span, scope=n.scope, type=n.type))
    return Graph(graph.inputs, [(o, memo[id(v)]) for o, v in graph.outputs], graph.meta)


def test_every_op_has_a_derivative_or_none_to_have() -> None:
    """A VJP rule, or a decomposition to differentiate; or no float result (sizes, masks, comparisons), or
    an op of inference graphs only (refused by name)."""
    inference_only = {Op.CACHED_ATTENTION, Op.GET, Op.GATHER_NBITS}
    leaves = {Op.INPUT, Op.PARAM, Op.CONST}
    no_float = {Op.NOT, Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE, Op.AND, Op.OR, Op.DIM, Op.ARANGE, Op.INDEX_MASK}
    for op, d in OPS.items():
        if op in inference_only | leaves | no_float:
            assert d.vjp is None, op
        else:
            assert d.vjp is not None or d.decompose is not None, op


def test_an_inference_op_is_refused_by_name() -> None:
    graph = _loss_of(fused(), "cached")
    with pytest.raises(AutodiffError, match="cached_attention has no derivative"):
        gradients(graph, [], inputs=["q"])
