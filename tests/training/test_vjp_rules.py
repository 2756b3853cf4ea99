"""Every op's VJP (its own rule, or its decomposition's) against central finite differences in float64 on
the interpreter, over each op's own example (OpDef.example, ir/examples.py): the registry's test loop.

Each float output y of an example becomes a loss ½Σy², whose gradient with respect to the float inputs
and parameters (the cotangent y pulled back through the op) is compared with the differences of the loss.
Kinks and jumps (relu, abs, max, floor, mod) are kept away from the probes by the examples' continuous
draws."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.ir import DType, Graph, Node, Op
from pseudoformer.ir.interpreter import run
from pseudoformer.ir.ops import OPS
from pseudoformer.passes.autodiff import GRAD, QUANTIZED, AutodiffError, gradients
from tests.training.fd import numeric_grad, to_float64, wide


def _loss_of(graph: Graph, name: str) -> Graph:
    y = dict(graph.outputs)[name]
    sq = Node(Op.MUL, (y, y))
    half = Node(Op.MUL, (Node(Op.REDUCE_SUM, (sq,), {"axes": list(range(y.type.rank)), "keepdims": False}),
                         Node(Op.CONST, (), {"value": 0.5, "dtype": y.dtype})))
    return Graph(list(graph.inputs), [("loss", half)], graph.meta)


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


def _inference_only() -> set[Op]:
    """Ops of inference graphs only, refused by the autodiff: those with several results (the cache's
    attention, onnxruntime's contrib kernels, made inside the ONNX backend after any training step), and
    the quantized table lookup (its only float operand is a quantized weight's scales)."""
    from pseudoformer.ir.examples import example

    several = {op for op in OPS if any(n.op is Op.GET for _, n in example(op).graph.outputs)}
    return several | {Op.GATHER_NBITS}


def _example_cases() -> list[tuple[str, str]]:
    from pseudoformer.ir.examples import example

    out = []
    refused = _inference_only()
    for op, d in OPS.items():
        if d.vjp is None and d.decompose is None or op in refused:
            continue
        out += [(op.value, name) for name, n in example(op).graph.outputs if n.dtype.is_float]
    return out


# The forms an op's rule does not cover yet, refused by name.
NOT_YET = {("scatter", "scatter_1"): "positions per row"}


@pytest.mark.parametrize(("op", "name"), _example_cases())
def test_each_registry_example_agrees_with_finite_differences(op: str, name: str) -> None:
    """The registry's loop: each op's own example (OpDef.example, ir/examples.py), every float output."""
    from pseudoformer.ir.examples import example

    ex = example(Op(op))
    graph = _loss_of(ex.graph, name)
    inputs, params = ex.feeds(2, 5, seed=1), ex.params
    quantized = {s.attrs["name"] for n in graph.nodes() if n.op in QUANTIZED for s in n.src if s.op is Op.PARAM}
    train = [p.attrs["name"] for p in graph.params() if p.dtype.is_float and p.attrs["name"] not in quantized]
    wrt_inputs = [n.attrs["name"] for n in graph.inputs if n.dtype is DType.float32]
    if (op, name) in NOT_YET:
        with pytest.raises(AutodiffError, match=NOT_YET[(op, name)]):
            gradients(graph, train, inputs=wrt_inputs)
        return
    got = run(to_float64(gradients(graph, train, inputs=wrt_inputs)), wide(inputs), wide(params))
    checked = 0
    for k in [*train, *wrt_inputs]:
        if GRAD + k in got:
            idx, fd = _fd(graph, inputs, params, k, inputs if k in inputs else params)
            np.testing.assert_allclose(got[GRAD + k].reshape(-1)[idx], fd, rtol=1e-6, atol=1e-6, err_msg=f"∂/∂{k}")
            checked += 1
    assert checked or not (train or wrt_inputs)


def test_every_op_has_a_derivative_or_none_to_have() -> None:
    """A VJP rule, or a decomposition to differentiate; or no float result (sizes, masks, comparisons), or
    an op of inference graphs only (refused by name)."""
    inference_only = _inference_only() | {Op.GET}
    leaves = {Op.INPUT, Op.PARAM, Op.CONST}
    no_float = {Op.NOT, Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE, Op.AND, Op.OR, Op.DIM, Op.ARANGE, Op.INDEX_MASK}
    for op, d in OPS.items():
        if op in inference_only | leaves | no_float:
            assert d.vjp is None, op
        else:
            assert d.vjp is not None or d.decompose is not None, op


def test_an_inference_op_is_refused_by_name() -> None:
    from pseudoformer.ir.examples import example

    graph = example(Op.CACHED_ATTENTION).graph
    loss = _loss_of(graph, next(name for name, n in graph.outputs if n.dtype.is_float))
    with pytest.raises(AutodiffError, match="cached_attention has no derivative"):
        gradients(loss, [], inputs=[n.attrs["name"] for n in graph.inputs if n.dtype is DType.float32])
