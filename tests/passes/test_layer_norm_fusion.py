"""layer_norm_fusion: Algorithm 6 / 6ε, as the frontend lowers it or as a user might write it, → LAYER_NORM."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from pseudoformer import ir
from pseudoformer.ir import Graph, Node, Op
from pseudoformer.ir.verify import verify
from pseudoformer.model import load
from pseudoformer.passes.fusions import layer_norm_fusion
from tests.passes.fusion_cases import (
    L,
    assert_same,
    const,
    graph,
    inp,
    nodes_of,
    onnx_ops,
    op,
    ops,
    param,
    prepared,
    random_inputs,
    random_params,
    small,
    spread_weights,
    tokens,
)
from tests.passes.ir_text import check_rewrite, text

D = 6
SIZES = {"batch": 3, "seq": 5}
BOTH = pytest.mark.parametrize("optimised", [False, True], ids=["raw", "cse+simplify"])


# --- the packaged models -----------------------------------------------------------------------


@BOTH
@pytest.mark.parametrize("name,count", [("gpt2", 2 * L + 1), ("bert", 2 * L + 2)])
def test_models_fuse_every_layer_norm(name: str, count: int, optimised: bool) -> None:
    model = small(name)
    before = prepared(model.graph, optimised)
    after, changed = layer_norm_fusion(before)
    verify(after)
    assert changed
    lns = nodes_of(after, Op.LAYER_NORM)
    assert len(lns) == count
    for n in lns:
        x, g, b = n.src
        assert n.attrs == {"axis": 1, "eps": pytest.approx(1e-5)}
        assert x.shape[1] == 8 and g.op is b.op is Op.PARAM and g.shape == b.shape == (8,)
    # Layer norm was the only user of reductions and square roots in these models.
    left = ops(after)
    assert left[Op.REDUCE_SUM] == left[Op.SQRT] == 0
    assert_same(before, after, {"x": tokens()}, spread_weights(model))


def test_gpt2_node_count_drops_and_parameters_keep_their_names() -> None:
    model = small("gpt2")
    before = prepared(model.graph, True)
    after, _ = layer_norm_fusion(before)
    # After CSE each layer norm is 15 nodes besides its input, γ, β and the shared constants
    # (d and ε); fused, it is one, and the constants go too.
    assert len(before.nodes()) - len(after.nodes()) == 14 * (2 * L + 1) + 2
    names = [n.src[1].attrs["name"] for n in nodes_of(after, Op.LAYER_NORM)]
    assert sorted(names) == sorted([f"layers.{i}.gamma_{k}" for i in range(L) for k in (1, 2)] + ["gamma"])


ALGORITHM_6 = """
    graph layer_norm(e: float32[batch, 3]) -> (e_hat: float32[batch, 3])
      %1 = const 3.0 : float32[]
      %2 = div %e, %1 : float32[batch, 3]
      %3 = reduce_sum %2 {axes=[1], keepdims=false} : float32[batch]
      %4 = unsqueeze %3 {axes=[1]} : float32[batch, 1]
      %5 = sub %e, %4 : float32[batch, 3]
      %6 = mul %5, %5 : float32[batch, 3]
      %7 = div %6, %1 : float32[batch, 3]
      %8 = reduce_sum %7 {axes=[1], keepdims=false} : float32[batch]
      %9 = sqrt %8 : float32[batch]
      %10 = unsqueeze %9 {axes=[1]} : float32[batch, 1]
      %11 = div %5, %10 : float32[batch, 3]
      %12 = param "gamma" : float32[3]
      %13 = mul %11, %12 : float32[batch, 3]
      %14 = param "beta" : float32[3]
      %15 = add %13, %14 : float32[batch, 3]
      return e_hat = %15
"""


def test_algorithm_6_without_eps_fuses_with_eps_0() -> None:
    # Before: the paper's Algorithm 6 as the frontend lowers it (then cse and simplify), at d_e = 3.
    model = load("models/paper/primitives.alg", entry="layer_norm", config="/dev/null", defines=["d_e=3"])
    assert text(prepared(model.graph, True)) == text(ir.parse(textwrap.dedent(ALGORITHM_6)))
    check_rewrite(layer_norm_fusion, ALGORITHM_6, """
        graph layer_norm(e: float32[batch, 3]) -> (e_hat: float32[batch, 3])
          %1 = param "gamma" : float32[3]
          %2 = param "beta" : float32[3]
          %3 = layer_norm %e, %1, %2 {axis=1, eps=0.0} : float32[batch, 3]
          return e_hat = %3
    """, tol=1e-5)


def test_fused_gpt2_lowers_to_layer_normalization_and_matches_the_interpreter() -> None:
    model = small("gpt2")
    after, _ = layer_norm_fusion(prepared(model.graph, True))
    counts = onnx_ops(after, {"x": tokens()}, spread_weights(model))
    assert counts["LayerNormalization"] == 2 * L + 1
    assert counts["ReduceSum"] == counts["Sqrt"] == 0


def test_fused_bert_lowers_to_layer_normalization_and_matches_the_interpreter() -> None:
    model = small("bert")
    after, _ = layer_norm_fusion(prepared(model.graph, True))
    counts = onnx_ops(after, {"x": tokens()}, spread_weights(model))
    assert counts["LayerNormalization"] == 2 * L + 2


# --- spellings a user might write -------------------------------------------------------------


def _mean(x: Node, axis: int, form: str, keepdims: bool) -> Node:
    d = float(x.shape[axis]) if isinstance(x.shape[axis], int) else 4.0
    if form == "mean":
        m = op(Op.REDUCE_MEAN, x, axes=[axis], keepdims=keepdims)
    elif form == "sum_div":
        m = op(Op.REDUCE_SUM, op(Op.DIV, x, const(d)), axes=[axis], keepdims=keepdims)
    elif form == "div_sum":
        m = op(Op.DIV, op(Op.REDUCE_SUM, x, axes=[axis], keepdims=keepdims), const(d))
    elif form == "sum_mul":
        m = op(Op.REDUCE_SUM, op(Op.MUL, const(1.0 / d), x), axes=[axis], keepdims=keepdims)
    else:
        raise ValueError(form)
    return m


def written(*, axis: int = 1, form: str = "mean", keepdims: bool = True, square: str = "mul",
            eps: float | Node | None = 1e-5, swapped: bool = False, unsqueeze_inside: bool = False,
            divisor: float | None = None) -> tuple[Graph, dict[str, Node]]:
    """ê = (e − m)/√(v + ε) ⊙ γ + β by hand, on [batch, D, seq] (axis 1) or [batch, seq, D] (axis 2)."""
    x = inp("x", "batch", D, "seq") if axis == 1 else inp("x", "batch", "seq", D)
    back = (lambda t: t) if keepdims else (lambda t: op(Op.UNSQUEEZE, t, axes=[axis]))
    m = _mean(x, axis, form, keepdims)
    if divisor is not None:  # a mean by the wrong count: a sum over D divided by something else
        m = op(Op.REDUCE_SUM, op(Op.DIV, x, const(divisor)), axes=[axis], keepdims=keepdims)
    centred = op(Op.SUB, x, back(m))
    sq = op(Op.MUL, centred, centred) if square == "mul" else op(Op.POW, centred, const(2.0))
    v = _mean(sq, axis, form, keepdims)
    if unsqueeze_inside:
        v = back(v)
    if eps is not None:
        e = eps if isinstance(eps, Node) else const(eps)
        v = op(Op.ADD, e, v) if swapped else op(Op.ADD, v, e)
    root = op(Op.SQRT, v)
    if not unsqueeze_inside:
        root = back(root)
    normed = op(Op.DIV, centred, root)
    g, b = param("gamma", D), param("beta", D)
    if axis == 1:  # γ 1ᵀ in the paper's layout
        g, b = op(Op.UNSQUEEZE, g, axes=[1]), op(Op.UNSQUEEZE, b, axes=[1])
    scaled = op(Op.MUL, g, normed) if swapped else op(Op.MUL, normed, g)
    out = op(Op.ADD, b, scaled) if swapped else op(Op.ADD, scaled, b)
    parts = {"mean": m, "centred": centred, "square": sq, "normed": normed}
    return graph([x], y=out), parts


SPELLINGS = [
    dict(form="mean", keepdims=True),
    dict(form="mean", keepdims=False),
    dict(form="sum_div", keepdims=False),
    dict(form="div_sum", keepdims=False),
    dict(form="sum_mul", keepdims=True, swapped=True),
    dict(form="mean", keepdims=True, square="pow"),
    dict(form="sum_div", keepdims=False, unsqueeze_inside=True),
    dict(form="mean", keepdims=False, swapped=True, axis=2),
    dict(form="sum_div", keepdims=False, eps=None, axis=2),
]


@pytest.mark.parametrize("spelling", SPELLINGS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_each_spelling_fuses_to_the_same_layer_norm(spelling: dict) -> None:
    before, _ = written(**spelling)
    refusals: list = []
    after, changed = layer_norm_fusion(before, refusals)
    assert changed and not refusals
    (ln,) = nodes_of(after, Op.LAYER_NORM)
    axis = spelling.get("axis", 1)
    eps = spelling.get("eps", 1e-5)
    assert ln.attrs == {"axis": axis, "eps": pytest.approx(0.0 if eps is None else eps)}
    assert [s.op for s in ln.src] == [Op.INPUT, Op.PARAM, Op.PARAM] and ln.src[1].shape == (D,)
    assert len(after.nodes()) == 4
    assert_same(before, after, random_inputs(before, SIZES), random_params(before))


# --- refusals: the graph stays as it was and the reason is recorded ----------------------------


def _refused(before: Graph) -> str:
    refusals: list = []
    after, changed = layer_norm_fusion(before, refusals)
    verify(after)
    assert not changed and after.outputs[0][1] is before.outputs[0][1]
    assert not nodes_of(after, Op.LAYER_NORM)
    assert len(refusals) == 1 and refusals[0][0] == "layer_norm"
    return refusals[0][1]


@pytest.mark.parametrize("part,role", [
    ("centred", "the centred value e − m"),
    ("mean", "the mean m or the variance v"),
    ("square", "the square (e − m)²"),
    ("normed", "the normalised value (e − m)/√(v + ε)"),
])
def test_an_intermediate_read_elsewhere_is_refused(part: str, role: str) -> None:
    g, parts = written(form="sum_div", keepdims=False)
    g.outputs.append((part, parts[part]))
    assert _refused(g).startswith(f"{role} (") and _refused(g).endswith("is also used outside the layer norm")


def test_e_minus_m_used_by_another_output_in_algorithm_6_is_refused() -> None:
    model = load("models/paper/primitives.alg", entry="layer_norm", config="/dev/null", defines=[f"d_e={D}"])
    g = prepared(model.graph, True)
    centred = next(n for n in g.nodes() if n.op is Op.SUB)
    g = Graph(g.inputs, [*g.outputs, ("centred", centred)], g.meta)
    why = _refused(g)
    assert why.startswith("the centred value e − m (sub : float32[batch, 6] at ") and "primitives.alg:" in why


def test_a_divisor_other_than_the_axis_size_is_refused() -> None:
    assert "divides by 5, not by the size 6" in _refused(written(form="sum_div", keepdims=False, divisor=5.0)[0])


def test_an_eps_that_is_not_a_constant_is_refused() -> None:
    eps = param("eps")
    assert "ε" in _refused(written(eps=eps)[0])


def test_a_symbolic_axis_is_refused() -> None:
    x = inp("x", "batch", "seq")
    m = op(Op.REDUCE_MEAN, x, axes=[1], keepdims=True)
    c = op(Op.SUB, x, m)
    v = op(Op.REDUCE_MEAN, op(Op.MUL, c, c), axes=[1], keepdims=True)
    y = op(Op.ADD, op(Op.MUL, op(Op.DIV, c, op(Op.SQRT, v)), param("g", 1)), param("b", 1))
    assert "symbolic size 'seq'" in _refused(graph([x], y=y))


def test_a_gamma_that_is_not_a_vector_over_the_axis_is_refused() -> None:
    g, parts = written(form="mean", keepdims=True)
    gamma = inp("gamma_full", "batch", D, "seq")  # a per-position scale is not layer norm's γ
    y = op(Op.ADD, op(Op.MUL, parts["normed"], gamma), op(Op.UNSQUEEZE, param("beta", D), axes=[1]))
    assert "γ" in _refused(graph([g.inputs[0], gamma], y=y))


def test_a_formula_that_is_not_layer_norm_is_left_alone_without_a_refusal() -> None:
    x = inp("x", "batch", D)
    c = op(Op.SUB, x, op(Op.REDUCE_MEAN, x, axes=[1], keepdims=True))
    y = op(Op.ADD, op(Op.MUL, c, param("g", D)), param("b", D))  # centred but not divided by σ
    refusals: list = []
    after, changed = layer_norm_fusion(graph([x], y=y), refusals)
    assert not changed and not refusals and after.outputs[0][1] is y


def test_fused_graph_runs_on_onnx_with_the_axis_last_and_not_last() -> None:
    for axis in (1, 2):
        before, _ = written(form="sum_div", keepdims=False, axis=axis)
        after, _ = layer_norm_fusion(before)
        inputs, params = random_inputs(before, SIZES), random_params(before)
        assert onnx_ops(after, inputs, params)["LayerNormalization"] == 1
        np.testing.assert_equal(after.outputs[0][1].attrs["axis"], axis)
