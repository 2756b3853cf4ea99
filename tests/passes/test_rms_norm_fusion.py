"""rms_norm fusion: e / √(Σ e² / d + ε) ⊙ γ → RMS_NORM → ONNX RMSNormalization (opset ≥ 23)."""

from __future__ import annotations

import os
import textwrap  # noqa: F401
from pathlib import Path

import numpy as np
import pytest

from pseudoformer import ir  # noqa: F401
from pseudoformer.generation import Generator, Sampling
from pseudoformer.ir import Op
from pseudoformer.ir.verify import verify
from pseudoformer.model import load
from pseudoformer.optimize import optimize
from pseudoformer.passes.fusions import layer_norm_fusion
from tests.passes.fusion_cases import (
    assert_same,
    const,
    graph,
    inp,
    nodes_of,
    onnx_ops,
    op,
    param,
    random_params,
)
from tests.passes.ir_text import check_rewrite, text  # noqa: F401

D = 6
DECODER = str(Path(__file__).with_name("rms_decoder.alg"))
SIZES = ["L=2", "H=2", "d_e=8", "d_mlp=16", "N_V=11", "d_attn=4", "d_mid=4", "ell_max=16", "eps=1e-6"]


def _decoder():
    return load(DECODER, config=os.devnull, defines=SIZES)


def written(*, divisor: float = D, eps: float | None = 1e-6, gamma_shape: tuple = (D,), form: str = "mul"):
    e = inp("e", "batch", "seq", D)
    sq = op(Op.MUL, e, e) if form == "mul" else op(Op.POW, e, const(2.0))
    r = op(Op.REDUCE_SUM, op(Op.DIV, sq, const(divisor)), axes=[2], keepdims=False)
    if eps is not None:
        r = op(Op.ADD, r, const(eps))
    root = op(Op.UNSQUEEZE, op(Op.SQRT, r), axes=[2])
    normed = op(Op.DIV, e, root)
    out = op(Op.MUL, param("gamma", *gamma_shape), normed)
    return graph([e], y=out), {"root": root, "normed": normed}


@pytest.mark.parametrize("form", ["mul", "pow"])
@pytest.mark.parametrize("eps", [1e-6, None])
def test_written_forms_fuse(form: str, eps: float | None) -> None:
    before, _ = written(form=form, eps=eps)
    after, changed = layer_norm_fusion(before)
    assert changed
    (n,) = nodes_of(after, Op.RMS_NORM)
    assert n.attrs == {"axis": 2, "eps": eps or 0.0}
    assert not nodes_of(after, Op.REDUCE_SUM)
    rng = np.random.default_rng(0)
    inputs = {"e": rng.standard_normal((2, 3, D)).astype(np.float32)}
    weights = random_params(before)
    assert_same(before, after, inputs, weights)
    assert onnx_ops(after, inputs, weights)["RMSNormalization"] == 1


def _refused(before) -> str:
    refusals: list = []
    after, changed = layer_norm_fusion(before, refusals)
    verify(after)
    assert not changed and not nodes_of(after, Op.RMS_NORM)
    assert [r[0] for r in refusals] == ["rms_norm"]
    return refusals[0][1]


def test_wrong_divisor_is_refused() -> None:
    assert "divides by 5, not by the size 6" in _refused(written(divisor=5)[0])


def test_gamma_not_a_vector_over_the_axis_is_refused() -> None:
    assert "γ" in _refused(written(gamma_shape=(1,))[0])


@pytest.mark.parametrize("part", ["root", "normed"])
def test_an_intermediate_read_elsewhere_is_refused(part: str) -> None:
    g, parts = written()
    g.outputs.append((part, parts[part]))
    assert "is also used outside it" in _refused(g)


def test_layer_norm_is_not_taken_for_an_rms_norm() -> None:
    model = load("models/gpt2.alg", config=os.devnull, defines=[s for s in SIZES if s != "eps=1e-6"] + ["eps=1e-5"])
    after = optimize(model.graph, 2)
    assert not nodes_of(after, Op.RMS_NORM) and len(nodes_of(after, Op.LAYER_NORM)) == 2 * 2 + 1


def test_decoder_fuses_every_rms_norm_and_runs_on_onnx_runtime() -> None:
    model = _decoder()
    after = optimize(model.graph, 2)
    norms = nodes_of(after, Op.RMS_NORM)
    assert len(norms) == 2 * 2 + 1
    assert all(n.attrs["axis"] == 2 for n in norms)  # the features axis, last after the layout pass
    assert not nodes_of(after, Op.REDUCE_SUM) and not nodes_of(after, Op.REDUCE_MEAN)
    x = np.random.default_rng(1).integers(0, 11, size=(2, 7))
    assert_same(model.graph, after, {"x": x}, model.weights)
    assert onnx_ops(after, {"x": x}, model.weights)["RMSNormalization"] == 5


def test_before_opset_23_it_is_written_out() -> None:
    from pseudoformer.backends.onnx import OnnxRunner, to_onnx
    from pseudoformer.ir.interpreter import run

    model = _decoder()
    after = optimize(model.graph, 2)
    x = np.random.default_rng(2).integers(0, 11, size=(1, 5))
    proto = to_onnx(after, model.weights, opset=22)
    assert "RMSNormalization" not in {n.op_type for n in proto.graph.node}
    np.testing.assert_allclose(OnnxRunner(proto).run({"x": x})["P"], run(after, {"x": x}, model.weights)["P"],
                               atol=1e-5, rtol=0)


def test_rms_decoder_generates_with_a_cache() -> None:
    model = _decoder()
    runs = [Generator(model, backend="onnx", model_output="probabilities", cache=c).generate(
        [3, 1, 4], max_new_tokens=6, sampling=Sampling(temperature=0.8), seed=1, keep_scores=True) for c in (True, False)]
    assert runs[0].tokens == runs[1].tokens
    assert max(np.abs(a - b).max() for a, b in zip(runs[0].scores, runs[1].scores, strict=True)) <= 1e-5


def test_rms_norm_over_the_features_as_ir_text() -> None:
    check_rewrite(layer_norm_fusion, """
        graph rms_norm(e: float32[batch, 4, seq]) -> (e_hat: float32[batch, 4, seq])
          %1 = mul %e, %e : float32[batch, 4, seq]
          %2 = const 4.0 : float32[]
          %3 = div %1, %2 : float32[batch, 4, seq]
          %4 = reduce_sum %3 {axes=[1], keepdims=true} : float32[batch, 1, seq]
          %5 = const 1e-06 : float32[]
          %6 = add %4, %5 : float32[batch, 1, seq]
          %7 = sqrt %6 : float32[batch, 1, seq]
          %8 = div %e, %7 : float32[batch, 4, seq]
          %9 = param "gamma" : float32[4]
          %10 = unsqueeze %9 {axes=[1]} : float32[4, 1]
          %11 = mul %8, %10 : float32[batch, 4, seq]
          return e_hat = %11
    """, """
        graph rms_norm(e: float32[batch, 4, seq]) -> (e_hat: float32[batch, 4, seq])
          %1 = param "gamma" : float32[4]
          %2 = rms_norm %e, %1 {axis=1, eps=1e-06} : float32[batch, 4, seq]
          return e_hat = %2
    """, tol=1e-5)
