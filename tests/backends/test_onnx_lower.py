"""Lowering to ONNX: every op agrees with the interpreter, at several sizes, from one model file."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx_cases import (
    F32,
    I64,
    SIZES,
    block,
    block_inputs,
    block_params,
    check_against_oracle,
    const,
    inp,
    lower_checked,
    op,
    param,
    structure,
    structure_inputs,
)

from pseudoformer.backends.onnx import DEFAULT_OPSET, BackendError, to_onnx
from pseudoformer.backends.onnx.lower import MIN_OPSET
from pseudoformer.ir.examples import every_example, example
from pseudoformer.ir.graph import Graph
from pseudoformer.ir.ops import OPS, Op
from pseudoformer.ir.verify import verify


def test_the_cases_are_well_formed():
    verify(block())
    verify(structure())


@pytest.mark.parametrize("opset", [MIN_OPSET, 21, DEFAULT_OPSET])
@pytest.mark.parametrize("op", list(OPS), ids=lambda op: op.value)
def test_each_ops_example_matches_the_interpreter_at_every_size(op, opset):
    """Every op, lowered by its own ONNX op or by its formula (attention by parts before opset 23, GELU
    before 20): the registry's examples, so that a new op is tested here without an edit."""
    ex = example(op)
    check_against_oracle(ex.graph, ex.params, [ex.feeds(b, s) for b, s in SIZES], opset=opset)


def test_block_matches_the_interpreter_at_every_size():
    check_against_oracle(block(), block_params(), [block_inputs(b, s) for b, s in SIZES])


def test_structure_ops_match_the_interpreter_at_every_size():
    check_against_oracle(structure(), {}, [structure_inputs(b, s) for b, s in SIZES])


def test_fused_ops_become_onnx_ops_from_opset_23_and_their_formulas_before():
    ex = every_example([Op.LAYER_NORM, Op.RMS_NORM, Op.ATTENTION, Op.GELU])
    kinds = {n.op_type for n in lower_checked(ex.graph, ex.params).graph.node}
    assert {"LayerNormalization", "RMSNormalization", "Attention", "Gelu"} <= kinds
    kinds = {n.op_type for n in lower_checked(ex.graph, ex.params, opset=21).graph.node}
    assert "Attention" not in kinds and "RMSNormalization" not in kinds and "Gelu" in kinds


@pytest.mark.parametrize("opset", [MIN_OPSET, 18, 19, 20, 21, DEFAULT_OPSET])
def test_every_supported_opset_runs_and_agrees(opset):
    # 17 lowers GELU by formula and ReduceMax/Mean with attribute axes; 20 brings the Gelu op.
    model = check_against_oracle(block(), block_params(), [block_inputs(2, 5)], opset=opset)
    assert model.opset_import[0].version == opset
    check_against_oracle(structure(), {}, [structure_inputs(2, 5)], opset=opset)
    has_gelu = any(n.op_type == "Gelu" for n in model.graph.node)
    assert has_gelu == (opset >= 20)


def test_symbolic_dims_become_dim_params():
    model = lower_checked(block(), block_params())

    def dims(vi):
        return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]

    assert dims(model.graph.input[0]) == ["batch", "seq"]
    outs = {o.name: dims(o) for o in model.graph.output}
    assert outs == {"P": ["batch", 11, "seq"], "peak": ["batch", "seq"], "total": ["batch"], "attn": ["batch", "seq", "seq"]}
    assert [o.name for o in model.graph.output] == ["P", "peak", "total", "attn"]


def test_initializers_are_named_by_param_and_tied_weights_stored_once():
    params = block_params()
    model = lower_checked(block(), params)
    names = [t.name for t in model.graph.initializer]
    assert sorted(names) == sorted(params)  # W_e appears twice in the graph, once here
    assert len(names) == len(set(names))
    stored = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    for name, value in params.items():
        np.testing.assert_array_equal(stored[name], value)


def test_dotted_param_names_survive():
    x = inp("x", F32, "batch", 3, "seq")
    w = param("layers.3.W.heads.0.W_q", 3, 3)
    g = Graph([x], [("y", op(Op.MATMUL, w, x))])
    p = {"layers.3.W.heads.0.W_q": np.eye(3, dtype=np.float32) * 2}
    model = check_against_oracle(g, p, [{"x": np.ones((2, 3, 4), np.float32)}])
    assert [t.name for t in model.graph.initializer] == ["layers.3.W.heads.0.W_q"]


def test_default_ir_version_is_one_onnxruntime_loads():
    model = lower_checked(block(), block_params())
    # onnx stamps its own newest IR version (14 for onnx 1.23) unless told; onnxruntime 1.31 refuses it.
    assert model.ir_version == onnx.helper.find_min_ir_version_for([model.opset_import[0]]) < onnx.IR_VERSION
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    older = lower_checked(block(), block_params(), opset=21)
    assert older.ir_version == 10  # what onnxruntime 1.20 reads


def test_explicit_ir_version_is_kept():
    assert lower_checked(block(), block_params(), ir_version=11).ir_version == 11


def test_names_are_deterministic_and_readable():
    a = to_onnx(block(), block_params()).SerializeToString()
    b = to_onnx(block(), block_params()).SerializeToString()
    assert a == b
    model = onnx.load_model_from_string(a)
    names = [n.name for n in model.graph.node]
    assert len(names) == len(set(names))
    assert any(n.startswith("layers.0/Attention/softmax_") for n in names)
    assert any(n.startswith("layers.0/LayerNorm/reduce_mean_") for n in names)
    produced = [o for n in model.graph.node for o in n.output]
    assert len(produced) == len(set(produced))


def test_internal_names_step_aside_for_a_graph_name_that_looks_like_one():
    x = inp("v0", F32, "batch", 2)
    y = op(Op.EXP, op(Op.NEG, x))
    model = check_against_oracle(Graph([x], [("v1", y), ("c0", op(Op.ADD, y, y))]), {},
                                 [{"v0": np.ones((3, 2), np.float32)}])
    assert [o.name for o in model.graph.output] == ["v1", "c0"]
    assert any(o.startswith("v_") for n in model.graph.node for o in n.output)


def test_metadata_is_recorded():
    model = lower_checked(block(), block_params(), metadata={"source": "block.alg"})
    props = {p.key: p.value for p in model.metadata_props}
    assert props == {"pseudoformer_version": "0.1.0", "source": "block.alg"}


def test_missing_or_misshapen_weights_are_reported():
    params = block_params()
    with pytest.raises(BackendError, match="W_q"):
        to_onnx(block(), {k: v for k, v in params.items() if k != "W_q"})
    with pytest.raises(BackendError, match=r"gamma has shape \(8,\)"):
        to_onnx(block(), {**params, "gamma": params["gamma"].ravel()})


def test_bad_options_are_refused():
    with pytest.raises(BackendError, match="opset 12"):
        to_onnx(block(), block_params(), opset=12)
    with pytest.raises(BackendError, match="dtype"):
        to_onnx(block(), block_params(), dtype="bfloat16")


def test_an_output_cannot_reuse_an_input_name():
    x = inp("x", F32, 2)
    with pytest.raises(BackendError, match="x"):
        to_onnx(Graph([x], [("x", op(Op.NEG, x))]), {})


def test_an_input_and_a_constant_can_be_outputs():
    x = inp("x", I64, "n")
    g = Graph([x], [("same", x), ("seven", const(7, I64)), ("half", const(0.5))])
    model = check_against_oracle(g, {}, [{"x": np.arange(4)}, {"x": np.arange(1)}])
    assert [o.name for o in model.graph.output] == ["same", "seven", "half"]
