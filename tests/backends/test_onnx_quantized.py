"""Quantized weights on onnxruntime (com.microsoft MatMulNBits, GatherBlockQuantized) against the
interpreter's dequantize-then-compute reference: within 1e-4 relative at every bit width and block
size, K a whole number of blocks or not, with and without zero points and bias. This checks the
packing bit for bit: one code or nibble out of place moves an output by a whole quantization step."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from pseudoformer.backends.onnx import OnnxRunner, to_onnx
from pseudoformer.ir import DType, Graph, Node, Op, TensorType, interpreter
from pseudoformer.passes.quantize import QuantizeOptions, quantize_graph

F32, I64 = DType.float32, DType.int64


def model(k: int, n: int = 24, vocab: int = 40) -> tuple[Graph, dict[str, np.ndarray]]:
    """y = x · W + b and a table's rows e = T[ids], W [k, n] and T [vocab, k] from random weights."""
    x = Node(Op.INPUT, (), {"name": "x", "type": TensorType(F32, ("batch", "seq", k))})
    ids = Node(Op.INPUT, (), {"name": "ids", "type": TensorType(I64, ("batch", "seq"))})

    def param(name: str, *shape: int) -> Node:
        return Node(Op.PARAM, (), {"name": name, "type": TensorType(F32, shape)})

    y = Node(Op.ADD, (Node(Op.MATMUL, (x, param("W", k, n))), param("b", n)))
    e = Node(Op.GATHER, (param("T", vocab, k), ids), {"axis": 0})
    rng = np.random.default_rng(k)
    weights = {"W": rng.standard_normal((k, n)).astype(np.float32), "b": rng.standard_normal(n).astype(np.float32),
               "T": rng.standard_normal((vocab, k)).astype(np.float32)}
    return Graph([x, ids], [("y", y), ("e", e)], {"entry": "Q"}), weights


def feed(k: int, vocab: int = 40) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(100 + k)
    return {"x": rng.standard_normal((2, 5, k)).astype(np.float32), "ids": rng.integers(0, vocab, (2, 5))}


def relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.parametrize("symmetric", [False, True], ids=["zero_points", "symmetric"])
@pytest.mark.parametrize("k_whole", [True, False], ids=["k_whole", "k_ragged"])
@pytest.mark.parametrize("block_size", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("bits", [4, 8])
def test_onnxruntime_equals_the_dequantized_reference(bits, block_size, k_whole, symmetric) -> None:
    k = 2 * block_size if k_whole else block_size + block_size // 2 + 3
    graph, weights = model(k)
    opts = QuantizeOptions(bits=bits, block_size=block_size, symmetric=symmetric, embeddings=True, accuracy_level=0)
    quantized, qweights, changed = quantize_graph(graph, weights, opts)
    ops = {n.op for n in quantized.nodes()}
    assert changed and {Op.MATMUL_NBITS, Op.GATHER_NBITS} <= ops and not {Op.MATMUL, Op.GATHER} & ops
    onnx_model = to_onnx(quantized, qweights)
    types = {n.op_type for n in onnx_model.graph.node}
    assert {"MatMulNBits", "GatherBlockQuantized"} <= types and "Add" not in types  # the bias went in
    got = OnnxRunner(onnx_model).run(feed(k))
    want = interpreter.run(quantized, feed(k), qweights)
    for name in ("y", "e"):
        assert got[name].shape == want[name].shape
        assert relative(got[name], want[name]) < 1e-4, name


def test_accuracy_level_4_quantizes_only_the_activations() -> None:
    """int8 activations: not the reference to 1e-4, but near it (the weights' codes are the same)."""
    graph, weights = model(64)
    opts = QuantizeOptions(bits=4, block_size=32, accuracy_level=4)
    quantized, qweights, _ = quantize_graph(graph, weights, opts)
    got = OnnxRunner(to_onnx(quantized, qweights)).run(feed(64))["y"]
    want = interpreter.run(quantized, feed(64), qweights)["y"]
    assert 0 < relative(got, want) < 0.02


def test_a_tied_table_is_stored_once() -> None:
    """The same matrix gathered (T) and multiplied (x · Tᵀ): one set of packed arrays, two ops."""
    x = Node(Op.INPUT, (), {"name": "x", "type": TensorType(F32, ("batch", 32))})
    ids = Node(Op.INPUT, (), {"name": "ids", "type": TensorType(I64, ("batch",))})
    t = Node(Op.PARAM, (), {"name": "T", "type": TensorType(F32, (40, 32))})
    logits = Node(Op.MATMUL, (x, Node(Op.TRANSPOSE, (t,), {"perm": [1, 0]})))
    graph = Graph([x, ids], [("logits", logits), ("e", Node(Op.GATHER, (t, ids), {"axis": 0}))], {})
    table = np.random.default_rng(0).standard_normal((40, 32)).astype(np.float32)
    quantized, qweights, _ = quantize_graph(graph, {"T": table}, QuantizeOptions(embeddings=True, accuracy_level=0))
    assert sorted(qweights) == ["T.quant", "T.scales", "T.zero_points"]
    onnx_model = to_onnx(quantized, qweights)
    assert len(onnx_model.graph.initializer) == 3
    inputs = {"x": np.ones((2, 32), np.float32), "ids": np.array([3, 7])}
    got = OnnxRunner(onnx_model).run(inputs)
    want = interpreter.run(quantized, inputs, qweights)
    assert relative(got["logits"], want["logits"]) < 1e-4 and relative(got["e"], want["e"]) < 1e-4


def test_float16_computes_with_half_scales() -> None:
    graph, weights = model(64)
    quantized, qweights, _ = quantize_graph(graph, weights, QuantizeOptions(bits=4, embeddings=True, accuracy_level=0))
    half = to_onnx(quantized, qweights, dtype="float16")
    scales = [i for i in half.graph.initializer if i.name.endswith(".scales")]
    assert scales and all(i.data_type == onnx.TensorProto.FLOAT16 for i in scales)
    got = OnnxRunner(half).run(feed(64))
    want = interpreter.run(quantized, feed(64), qweights)
    assert relative(got["y"].astype(np.float32), want["y"]) < 2e-3
    assert relative(got["e"].astype(np.float32), want["e"]) < 2e-3


def test_local_functions_hold_the_quantized_ops() -> None:
    """compile --functions --quantize: each layer's function calls MatMulNBits, so each function imports
    com.microsoft as the model does, and the model computes the flat model's bits."""
    from pseudoformer.deploy import compile

    sizes = ["L=2", "H=4", "d_e=64", "d_mlp=128", "d_attn=16", "d_mid=16", "N_V=101"]
    x = {"x": np.array([[5, 17, 3, 99]])}
    flat, functions = (compile("models/gpt2.alg", defines=sizes, quantize="int4", quantize_embeddings=True,
                               accuracy_level=0, functions=f).onnx for f in (False, True))
    assert functions.functions and all(any(o.domain == "com.microsoft" for o in fn.opset_import)
                                       for fn in functions.functions)
    assert any(n.op_type == "MatMulNBits" for fn in functions.functions for n in fn.node)
    np.testing.assert_array_equal(OnnxRunner(functions).run(x)["Y"], OnnxRunner(flat).run(x)["Y"])
