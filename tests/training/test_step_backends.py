"""The one training step graph on every backend: the numpy interpreter is the reference; onnxruntime
(parameters and state kept in bound OrtValues between steps), ONNX's reference evaluator (standard ops
only) and TVM agree with it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

from pseudoformer.backends.onnx import to_onnx
from pseudoformer.model import load
from pseudoformer.passes.training_step import LR, NEW, Optimizer
from pseudoformer.training.compile import compile_step
from pseudoformer.training.runtimes import OrtStep, make_runtime

HERE = Path(__file__).parent
OPTIMIZERS = {"sgd": Optimizer("sgd"), "adamw": Optimizer("adamw", clip=0.5)}
X = np.array([[1, 2, 3, 4, 5, 1], [3, 3, 3, 7, 8, 1]], np.int64)


def _step(opt: str):  # type: ignore[no-untyped-def]
    model = load(HERE / "gpt2_loss.alg", defines=["L=1", "H=2", "d_e=8", "d_mlp=16", "d_attn=4", "d_mid=4",
                                                  "N_V=11", "ell_max=16", "eps=1e-5"], seed=2)
    # b_k: an exactly zero gradient, which AdamW turns into steps of rounding noise
    train = [k for k in model.weights if ".b_k" not in k]
    return compile_step(model.graph, model.weights, train=train, optimizer=OPTIMIZERS[opt])


def _reference(step, steps: int = 3):  # type: ignore[no-untyped-def]
    rt = make_runtime("interpreter", step.graph, step.frozen, step.state)
    return [rt.step({"x": X}, 0.05) for _ in range(steps)], rt.values()


@pytest.mark.parametrize("opt", OPTIMIZERS)
def test_onnxruntime_keeps_buffers_between_steps_and_agrees(opt: str) -> None:
    step = _step(opt)
    losses, want = _reference(step)
    rt = make_runtime("onnxruntime", step.graph, step.frozen, step.state)
    assert isinstance(rt, OrtStep)
    got = [rt.step({"x": X}, 0.05) for _ in range(3)]
    np.testing.assert_allclose(got, losses, rtol=1e-5)
    values = rt.values()
    assert all(np.allclose(values[k], want[k], rtol=1e-4, atol=1e-6) for k in want)
    # the carried values live in OrtValues: two sets that swap, never rebuilt from numpy
    assert all(type(v).__name__ == "OrtValue" for v in rt.buffers[0].values())


@pytest.mark.parametrize("opt", OPTIMIZERS)
def test_the_step_is_standard_onnx_and_the_reference_evaluator_agrees(opt: str) -> None:
    step = _step(opt)
    proto = to_onnx(step.graph, step.frozen)
    assert {d.domain for d in proto.opset_import} <= {"", "ai.onnx"}
    onnx.checker.check_model(proto, full_check=True)
    feed = {"x": X, LR: np.asarray(0.05, np.float32), **step.state}
    names = [o.name for o in proto.graph.output]
    got = dict(zip(names, ReferenceEvaluator(proto).run(None, feed), strict=True))
    rt = make_runtime("interpreter", step.graph, step.frozen, step.state)
    loss = rt.step({"x": X}, 0.05)
    assert abs(float(got["loss"]) - loss) <= 1e-5 * abs(loss)
    want = rt.values()
    for k, v in want.items():
        np.testing.assert_allclose(got[NEW + k], v, rtol=1e-4, atol=1e-6, err_msg=k)


def test_tvm_compiles_the_same_step_and_agrees() -> None:
    step = _step("adamw")
    losses, want = _reference(step)
    rt = make_runtime("tvm", step.graph, step.frozen, step.state)
    np.testing.assert_allclose([rt.step({"x": X}, 0.05) for _ in range(3)], losses, rtol=1e-5)
    got = rt.values()
    assert all(np.allclose(got[k], want[k], rtol=1e-4, atol=1e-6) for k in want)


def test_the_short_onnx_forms_of_cotangents_compute_what_the_general_ones_do() -> None:
    """backends/onnx/lowerings/cotangents.py: zeros, broadcasts, a slice's transpose and a batched weight
    gradient lowered short (ConstantOfShape, Expand, Pad, Gemm over the flattened batch) give the general
    lowering's step, and the dead operands they leave are pruned."""
    from pseudoformer.backends.onnx.lowerings import cotangents

    step = _step("sgd")
    short = to_onnx(step.graph, step.frozen)
    cotangents.SHORT_FORMS = False
    try:
        plain = to_onnx(step.graph, step.frozen)
    finally:
        cotangents.SHORT_FORMS = True
    ops = {form: [n.op_type for n in m.graph.node] for form, m in (("short", short), ("plain", plain))}
    assert "ScatterElements" in ops["plain"] and "ScatterElements" not in ops["short"]
    assert {"ConstantOfShape", "Expand", "Pad", "Gemm"} <= set(ops["short"])
    assert ops["short"].count("Less") < ops["plain"].count("Less")  # the x < x of the zeros: pruned
    feed = {"x": X, LR: np.asarray(0.05, np.float32), **step.state}
    got, want = (ReferenceEvaluator(m).run(None, feed) for m in (short, plain))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
