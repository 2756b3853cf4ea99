"""Lowering to float16: fp16 weights and matmuls, fp32 reductions and softmaxes, close to fp32 results."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx_cases import SIZES, block, block_inputs, block_params, lower_checked, structure, structure_inputs

from pseudoformer.backends.onnx import OnnxRunner
from pseudoformer.ir import interpreter

# fp16 keeps ~3 significant digits (machine epsilon 2**-10 ≈ 1e-3); each value below passes through
# about ten rounded fp16 ops at magnitudes of order 1, so 1e-2 absolute-plus-relative leaves ~3x
# headroom over the worst error seen (~3e-3, on the logits' max).
FP16_TOL = 1e-2


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    g = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in [*g.input, *g.output, *g.value_info]}
    types.update({t.name: t.data_type for t in g.initializer})
    for n in g.node:
        if n.op_type == "Constant":
            types[n.output[0]] = n.attribute[0].t.data_type
    return types


def test_block_in_fp16_is_close_to_the_fp32_oracle():
    graph, params = block(), block_params()
    runner = OnnxRunner(lower_checked(graph, params, dtype="float16"))
    for b, s in SIZES:
        feed = block_inputs(b, s)
        got, want = runner.run(feed), interpreter.run(graph, feed, params)
        for name, w in want.items():
            assert got[name].dtype == np.float16, name
            np.testing.assert_allclose(got[name].astype(np.float32), w, rtol=FP16_TOL, atol=FP16_TOL, err_msg=name)


def test_fp16_types_weights_and_boundaries():
    model = lower_checked(block(), block_params(), dtype="float16")
    assert {t.data_type for t in model.graph.initializer} == {TensorProto.FLOAT16}
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.INT64
    assert {o.type.tensor_type.elem_type for o in model.graph.output} == {TensorProto.FLOAT16}
    types = _elem_types(model)
    by_op: dict[str, set[int]] = {}
    for n in model.graph.node:
        if n.input:
            by_op.setdefault(n.op_type, set()).add(types[n.input[0]])
    # Statistics and normalisers see fp32; the bulk of the arithmetic stays fp16.
    assert by_op["Softmax"] == by_op["ReduceMean"] == by_op["ReduceSum"] == by_op["ReduceMax"] == {TensorProto.FLOAT}
    assert by_op["MatMul"] == {TensorProto.FLOAT16}
    # The layer norm's squared deviations exist only to be averaged, so they are squared in fp32.
    squares = [n for n in model.graph.node if n.op_type == "Mul" and n.input[0] == n.input[1]
               and n.name.startswith("layers.0/LayerNorm/")]
    assert [types[n.output[0]] for n in squares] == [TensorProto.FLOAT]


def test_float_inputs_keep_their_declared_type_under_fp16():
    graph = structure()
    model = lower_checked(graph, {}, dtype="float16")
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    feed = structure_inputs(2, 5)
    got, want = OnnxRunner(model).run(feed), interpreter.run(graph, feed, {})
    for name, w in want.items():
        if w.dtype == np.float32:
            assert got[name].dtype == np.float16, name
            np.testing.assert_allclose(got[name].astype(np.float32), w, rtol=FP16_TOL, atol=FP16_TOL, err_msg=name)
        elif name != "to_int":  # 10x then truncation: fp16 rounding may cross an integer
            np.testing.assert_array_equal(got[name], w, err_msg=name)
