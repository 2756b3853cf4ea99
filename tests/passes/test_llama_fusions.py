"""The Llama fusions: the rotate-half RoPE → ROTARY, SiLU(W₁X) ⊙ W₃X → SWIGLU over one packed product,
grouped-query heads → one projection and one grouped attention, and the rotated heads packed for ONNX
(RotaryEmbedding and Attention in 3-D). Each as Before/Expected IR text with its numbers held, then on
the whole decoder as llama.alg elaborates (tests/passes/llama_graphs.py) against the interpreter and ORT."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from pseudoformer.backends.onnx import to_onnx
from pseudoformer.backends.onnx.runner import OnnxRunner
from pseudoformer.ir import Op
from pseudoformer.ir.interpreter import run
from pseudoformer.passes.fusions import rotary_fusion, swiglu_fusion
from pseudoformer.passes.manager import PassContext, pipeline, run_passes
from pseudoformer.passes.packed_heads import pack_heads
from tests.passes import llama_graphs
from tests.passes.ir_text import check_rewrite

ANGLES = """
  %1 = dim %x {axis=2} : int64[]
  %2 = arange %1 {dim="seq"} : int64[seq]
  %3 = cast %2 {dtype=float32} : float32[seq]
  %4 = unsqueeze %3 {axes=[0]} : float32[1, seq]
  %5 = const 10000.0 : float32[]
  %6 = const 2 : int64[]
  %7 = arange %6 {dim=2} : int64[2]
  %8 = cast %7 {dtype=float32} : float32[2]
  %9 = const -0.5 : float32[]
  %10 = mul %8, %9 : float32[2]
  %11 = pow %5, %10 : float32[2]
  %12 = unsqueeze %11 {axes=[1]} : float32[2, 1]
  %13 = mul %4, %12 : float32[2, seq]
  %14 = cos %13 : float32[2, seq]
  %15 = sin %13 : float32[2, seq]"""

ROPE = """
graph RoPE(x: float32[batch, 4, seq]) -> (y: float32[batch, 4, seq])""" + ANGLES + """
  %16 = const 0 : int64[]
  %17 = const 2 : int64[]
  %18 = const 4 : int64[]
  %19 = slice %x, %16, %17 {axis=1, dim=2} : float32[batch, 2, seq]
  %20 = slice %x, %17, %18 {axis=1, dim=2} : float32[batch, 2, seq]
  %21 = mul %19, %14 : float32[batch, 2, seq]
  %22 = mul %15, %20 : float32[batch, 2, seq]
  %23 = sub %21, %22 : float32[batch, 2, seq]
  %24 = mul %20, %14 : float32[batch, 2, seq]
  %25 = mul %19, %15 : float32[batch, 2, seq]
  %26 = add %25, %24 : float32[batch, 2, seq]
  %27 = concat %23, %26 {axis=1} : float32[batch, 4, seq]
  return y = %27
"""

ROTARY = """
graph RoPE(x: float32[batch, 4, seq]) -> (y: float32[batch, 4, seq])""" + ANGLES + """
  %16 = rotary %x, %14, %15 {axis=1} : float32[batch, 4, seq]
  return y = %16
"""


def test_rope_in_the_papers_layout_is_one_rotary() -> None:
    check_rewrite(rotary_fusion, ROPE, ROTARY, tol=1e-5)


@pytest.mark.parametrize(("old", "new", "why"), [
    ("%26 = add %25, %24", "%26 = add %25, %21", "not x₂ ⊙ cos + x₁ ⊙ sin"),
    ("%25 = mul %19, %15", "%25 = mul %19, %14", "other angles"),
    ("%16 = const 0 : int64[]", "%16 = const 1 : int64[]", "start at 1 and 2"),
])
def test_what_is_not_a_rotation_is_refused_with_its_reason(old: str, new: str, why: str) -> None:
    from pseudoformer import ir

    refusals: list = []
    _, changed = rotary_fusion(ir.parse(ROPE.replace(old, new)), refusals)
    assert not changed
    assert any(why in r[1] for r in refusals), refusals


def test_a_rotated_half_used_elsewhere_is_refused() -> None:
    from pseudoformer import ir

    g = ir.parse(ROPE.replace("return y = %27", "return y = %27, z = %23")
                 .replace("-> (y: float32[batch, 4, seq])", "-> (y: float32[batch, 4, seq], z: float32[batch, 2, seq])"))
    refusals: list = []
    _, changed = rotary_fusion(g, refusals)
    assert not changed and "used elsewhere" in refusals[0][1]


MLP = """
graph MLP(x: float32[batch, 4, seq]) -> (y: float32[batch, 4, seq])
  %1 = param "W_1" : float32[6, 4]
  %2 = matmul %1, %x : float32[batch, 6, seq]
  %3 = silu %2 : float32[batch, 6, seq]
  %4 = param "W_3" : float32[6, 4]
  %5 = matmul %4, %x : float32[batch, 6, seq]
  %6 = mul %5, %3 : float32[batch, 6, seq]
  %7 = param "W_2" : float32[4, 6]
  %8 = matmul %7, %6 : float32[batch, 4, seq]
  return y = %8
"""

SWIGLU = """
graph MLP(x: float32[batch, 4, seq]) -> (y: float32[batch, 4, seq])
  %1 = param "W_1" : float32[6, 4]
  %2 = param "W_3" : float32[6, 4]
  %3 = concat %1, %2 {axis=0} : float32[12, 4]
  %4 = matmul %3, %x : float32[batch, 12, seq]
  %5 = swiglu %4 {axis=1} : float32[batch, 6, seq]
  %6 = param "W_2" : float32[4, 6]
  %7 = matmul %6, %5 : float32[batch, 4, seq]
  return y = %7
"""


def test_swiglu_packs_the_gate_and_up_projections() -> None:
    check_rewrite(swiglu_fusion, MLP, SWIGLU, tol=1e-5)


def test_swiglu_of_two_inputs_is_refused() -> None:
    from pseudoformer import ir

    src = MLP.replace("graph MLP(x: float32[batch, 4, seq])", "graph MLP(x: float32[batch, 4, seq], z: float32[batch, 4, seq])")
    refusals: list = []
    _, changed = swiglu_fusion(ir.parse(src.replace("%5 = matmul %4, %x", "%5 = matmul %4, %z")), refusals)
    assert not changed and "different inputs" in refusals[0][1]


# ---- the whole decoder


def _optimised(graph):
    ctx = PassContext()
    out = run_passes(graph, pipeline(2), check=True, ctx=ctx)
    assert not ctx.refusals, ctx.refusals
    return out


def _feed_and_weights(graph, seed: int = 0):
    rng = np.random.default_rng(seed)
    weights = {p.attrs["name"]: (rng.standard_normal(p.shape) * 0.3).astype(np.float32) for p in graph.params()}
    return {"x": rng.integers(0, llama_graphs.TINY["N_V"], (2, 7))}, weights


@pytest.mark.parametrize("bias", [False, True])
def test_decoder_has_one_projection_rotary_pair_and_grouped_attention_per_layer(bias: bool) -> None:
    g = llama_graphs.llama(bias=bias)
    out = _optimised(g)
    ops = Counter(n.op for n in out.nodes())
    layers = llama_graphs.TINY["L"]
    assert ops[Op.ATTENTION] == layers and ops[Op.SWIGLU] == layers and ops[Op.RMS_NORM] == 2 * layers + 1
    assert ops[Op.ROTARY] == 2 * layers  # the queries' and the keys', over all heads at once
    assert ops[Op.MATMUL] == 4 * layers + 1 and ops[Op.SOFTMAX] == 0
    assert ops[Op.COS] == ops[Op.SIN] == 1  # the angles, computed once for every layer
    for att in (n for n in out.nodes() if n.op is Op.ATTENTION):  # 4 query heads over 2 key/value heads
        assert att.src[0].shape[1] == 4 and att.src[1].shape[1] == 2 == att.src[2].shape[1]
    feed, weights = _feed_and_weights(g)
    np.testing.assert_allclose(run(out, feed, weights)["Y"], run(g, feed, weights)["Y"], rtol=1e-5, atol=1e-5)


def test_rotated_heads_are_packed_for_onnx() -> None:
    g = llama_graphs.llama()
    out = _optimised(g)
    packed, changed = pack_heads(out)
    assert changed
    rot = [n for n in packed.nodes() if n.op is Op.ROTARY]
    assert {(n.attrs["heads"], n.type.rank) for n in rot} == {(4, 3), (2, 3)}
    feed, weights = _feed_and_weights(g)
    np.testing.assert_allclose(run(packed, feed, weights)["Y"], run(g, feed, weights)["Y"], rtol=1e-5, atol=1e-5)


def test_decoder_on_onnx_runtime_has_four_matmuls_per_layer_and_no_per_head_ops() -> None:
    g = llama_graphs.llama()
    model = to_onnx(_optimised(g), _feed_and_weights(g)[1])
    ops = Counter(n.op_type for n in model.graph.node)
    layers = llama_graphs.TINY["L"]
    assert ops["MatMul"] == 4 * layers + 1 and ops["Attention"] == layers and ops["RMSNormalization"] == 2 * layers + 1
    assert ops["RotaryEmbedding"] == 2 * layers and ops["Softmax"] == 0 and ops["Reshape"] == 0
    feed, weights = _feed_and_weights(g)
    got = OnnxRunner(model).run(feed)["Y"]
    np.testing.assert_allclose(got, run(g, feed, weights)["Y"], rtol=1e-5, atol=1e-5)


def test_sliding_window_mask_becomes_the_attentions_window() -> None:
    """Mistral's [[t ≤ t' ∧ t' − t < w]]: causal with window=w and no mask operand, numbers held."""
    g = llama_graphs.llama(window=3)
    out = _optimised(g)
    atts = [n for n in out.nodes() if n.op is Op.ATTENTION]
    assert len(atts) == llama_graphs.TINY["L"]
    assert all(a.attrs["causal"] and a.attrs["window"] == 3 and len(a.src) == 3 for a in atts)
    feed, weights = _feed_and_weights(g)
    np.testing.assert_allclose(run(out, feed, weights)["Y"], run(g, feed, weights)["Y"], rtol=1e-5, atol=1e-5)
