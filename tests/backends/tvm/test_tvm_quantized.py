"""Quantized weights on TVM (our kernels, backends/tvm/nbits.py) against the interpreter's
dequantize-then-compute reference, within 1e-4 relative as onnxruntime's level 0 is: 4 and 8 bits,
blocks of 16 to 128, K a whole number of blocks or not, with and without zero points and bias.

Every case is one small model; all cases go into one graph so that TVM compiles once."""

from __future__ import annotations

import numpy as np
import pytest
import tvm_util  # noqa: F401  (skips without TVM; puts the ONNX tests' helpers on the path)
from test_onnx_quantized import feed, model, relative

from pseudoformer.backends.onnx import OnnxRunner, to_onnx
from pseudoformer.backends.tvm.build import compile_graph
from pseudoformer.backends.tvm.nbits import split_nibbles, split_params
from pseudoformer.ir import DType, Graph, Node, Op, TensorType, interpreter
from pseudoformer.ir.ops.quantized import dequantize
from pseudoformer.passes.quantize import QuantizeOptions, quantize_graph

CASES = [(bits, bs, k_whole, symmetric) for bits in (4, 8) for bs in (16, 32, 64, 128)
         for k_whole, symmetric in ((True, False), (False, True), (False, False), (True, True))
         if (k_whole, symmetric) in ((True, False), (False, True)) or bs == 32]


def _renamed(graph: Graph, weights: dict[str, np.ndarray], prefix: str) -> tuple[Graph, dict[str, np.ndarray]]:
    """The graph with its inputs, parameters and outputs named `prefix`.<name>."""
    memo: dict[int, Node] = {}

    def copy(n: Node) -> Node:
        if id(n) not in memo:
            attrs = dict(n.attrs)
            if n.op in (Op.INPUT, Op.PARAM):
                attrs["name"] = f"{prefix}.{attrs['name']}"
            memo[id(n)] = Node(n.op, tuple(copy(s) for s in n.src), attrs)
        return memo[id(n)]

    outs = [(f"{prefix}.{name}", copy(n)) for name, n in graph.outputs]
    return Graph([copy(i) for i in graph.inputs], outs, {}), {f"{prefix}.{k}": v for k, v in weights.items()}


@pytest.fixture(scope="module")
def all_cases() -> tuple[Graph, dict[str, np.ndarray], dict[str, np.ndarray]]:
    inputs, outputs, weights, feeds = [], [], {}, {}
    for i, (bits, bs, k_whole, symmetric) in enumerate(CASES):
        k = 2 * bs if k_whole else bs + bs // 2 + 3
        graph, w = model(k)
        opts = QuantizeOptions(bits=bits, block_size=bs, symmetric=symmetric, embeddings=True, accuracy_level=0)
        quantized, qw, changed = quantize_graph(graph, w, opts)
        assert changed
        g, qw = _renamed(quantized, qw, f"c{i}")
        inputs += g.inputs
        outputs += g.outputs
        weights.update(qw)
        feeds.update({f"c{i}.{k_}": v for k_, v in feed(k).items()})
    return Graph(inputs, outputs, {"entry": "Q"}), weights, feeds


@pytest.fixture(scope="module")
def compiled(all_cases):  # noqa: ANN001, ANN201
    graph, weights, feeds = all_cases
    return compile_graph(graph, weights).run(feeds)


@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[f"{b}bit-block{bs}-{'k_whole' if kw else 'k_ragged'}-{'sym' if s else 'zp'}"
                              for b, bs, kw, s in CASES])
def test_tvm_equals_the_dequantized_reference(all_cases, compiled, case: int) -> None:  # noqa: ANN001
    graph, weights, feeds = all_cases
    want = interpreter.run(graph, feeds, weights)
    for name in (f"c{case}.y", f"c{case}.e"):
        assert compiled[name].shape == want[name].shape
        assert relative(compiled[name], want[name]) < 1e-4, name


def test_the_kernels_are_ours_and_the_weights_stay_packed(all_cases) -> None:  # noqa: ANN001
    """No quantized op took its formula (decompose): the folded float weights would be 8× larger."""
    from pseudoformer.backends.tvm.build import prepare

    graph, weights, _ = all_cases
    lowered, folded = prepare(graph, weights)
    ops = {n.op for n in lowered.nodes()}
    assert {Op.MATMUL_NBITS, Op.GATHER_NBITS} <= ops and Op.MATMUL not in ops
    assert sum(v.nbytes for v in folded.values()) < sum(v.nbytes for v in weights.values()) * 1.01


def test_split_nibbles_is_the_same_weights() -> None:
    rng = np.random.default_rng(1)
    packed = rng.integers(0, 256, (5, 3, 16), dtype=np.uint8)
    split = split_nibbles(packed)
    codes = np.concatenate([split & 15, split >> 4], axis=-1)  # Q4_0: byte b is k = b and b + 16
    scales = np.ones((5, 3), np.float32)
    np.testing.assert_array_equal(codes.reshape(5, 96).astype(np.float32) - 8,
                                  dequantize(packed, scales, None, k=96, bits=4, block_size=32))


def test_a_tied_table_is_split_once_for_both_kernels() -> None:
    """The embedding gathered and the unembedding multiplied from one packed table, in our nibble order."""
    x = Node(Op.INPUT, (), {"name": "x", "type": TensorType(DType.float32, ("batch", 32))})
    ids = Node(Op.INPUT, (), {"name": "ids", "type": TensorType(DType.int64, ("batch",))})
    t = Node(Op.PARAM, (), {"name": "T", "type": TensorType(DType.float32, (40, 32))})
    logits = Node(Op.MATMUL, (x, Node(Op.TRANSPOSE, (t,), {"perm": [1, 0]})))
    graph = Graph([x, ids], [("logits", logits), ("e", Node(Op.GATHER, (t, ids), {"axis": 0}))], {})
    table = np.random.default_rng(0).standard_normal((40, 32)).astype(np.float32)
    quantized, qweights, _ = quantize_graph(graph, {"T": table}, QuantizeOptions(embeddings=True, accuracy_level=0))
    assert split_params(quantized) == {"T.quant"}
    inputs = {"x": np.random.default_rng(2).standard_normal((2, 32)).astype(np.float32), "ids": np.array([3, -7])}
    got = compile_graph(quantized, qweights).run(inputs)
    want = interpreter.run(quantized, inputs, qweights)
    ort = OnnxRunner(to_onnx(quantized, qweights)).run({**inputs, "ids": np.array([3, 33])})
    assert relative(got["logits"], want["logits"]) < 1e-4 and relative(got["e"], want["e"]) < 1e-4
    assert relative(got["logits"], ort["logits"]) < 1e-4
