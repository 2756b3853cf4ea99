"""gelu_fusion: GPT-2's written-out tanh GELU, and the erf form, → one GELU node."""

from __future__ import annotations

import math
import textwrap  # noqa: F401
from pathlib import Path

import pytest

from pseudoformer import ir  # noqa: F401
from pseudoformer.ir import Graph, Node, Op
from pseudoformer.ir.verify import verify
from pseudoformer.model import load
from pseudoformer.passes.fusions import gelu_fusion
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
    prepared,
    random_inputs,
    random_params,
    small,
    spread_weights,
    tokens,
)
from tests.passes.ir_text import check_rewrite, text  # noqa: F401

SIZES = {"batch": 3, "seq": 5}
BOTH = pytest.mark.parametrize("optimised", [False, True], ids=["raw", "cse+simplify"])
C = math.sqrt(2 / math.pi)


# --- the packaged models -----------------------------------------------------------------------


@BOTH
def test_gpt2_has_one_tanh_gelu_per_layer_and_no_tanh(optimised: bool) -> None:
    model = small("gpt2")
    before = prepared(model.graph, optimised)
    after, changed = gelu_fusion(before)
    verify(after)
    assert changed
    gelus = nodes_of(after, Op.GELU)
    assert len(gelus) == L and all(n.attrs == {"approximate": "tanh"} for n in gelus)
    # The GELU's operand is the first MLP layer's output, W¹ X̃ + b¹ 1ᵀ.
    assert all(n.src[0].op is Op.ADD and n.src[0].shape[1] == 16 for n in gelus)
    assert ops(after)[Op.TANH] == 0
    assert_same(before, after, {"x": tokens()}, spread_weights(model))


@BOTH
def test_bert_keeps_its_exact_gelu_and_changes_nothing(optimised: bool) -> None:
    before = prepared(small("bert").graph, optimised)
    refusals: list = []
    after, changed = gelu_fusion(before, refusals)
    assert not changed and not refusals
    gelus = nodes_of(after, Op.GELU)
    assert len(gelus) == L + 1 and all(n.attrs == {"approximate": "none"} for n in gelus)


def test_fused_gpt2_lowers_to_gelu_and_matches_the_interpreter() -> None:
    model = small("gpt2")
    after, _ = gelu_fusion(prepared(model.graph, True))
    counts = onnx_ops(after, {"x": tokens()}, spread_weights(model))
    assert counts["Gelu"] == L and counts["Tanh"] == 0


ERF_ALG = """\
Algorithm: y ← GELU_erf(x)
  /* GELU in its exact form, written out by a user. */
  Input: x ∈ ℝ
  Output: y ∈ ℝ
  1 return y = 0.5 x (1 + erf(x / √2))

Algorithm: Y ← Layer(X | W)
  Input: X ∈ ℝ^{d × ℓ_max}
  Output: Y ∈ ℝ^{d × ℓ_max}
  Hyperparameters: d ∈ ℕ
  Parameters: W ∈ ℝ^{d × d}
  1 return Y = GELU_erf(W X)
"""


def test_the_erf_form_a_user_writes_becomes_the_exact_gelu(tmp_path: Path) -> None:
    src = tmp_path / "erf.alg"
    src.write_text(ERF_ALG, encoding="utf-8")
    model = load(src, entry="Layer", config="/dev/null", defines=["d=4", "ell_max=6"])
    after, changed = gelu_fusion(model.graph)
    assert changed
    (g,) = nodes_of(after, Op.GELU)
    assert g.attrs == {"approximate": "none"} and g.src[0].op is Op.MATMUL
    assert ops(after)[Op.ERF] == 0
    inputs = random_inputs(model.graph, {"batch": 2})
    assert_same(model.graph, after, inputs, model.weights)
    assert onnx_ops(after, inputs, model.weights)["Gelu"] == 1


# --- spellings a user might write -------------------------------------------------------------


def tanh_gelu(x: Node, *, order: str = "frontend", cube: str = "xx*x", k: float = 0.044715,
              half: float = 0.5) -> dict[str, Node]:
    """0.5 x (1 + tanh(√(2/π)(x + k x³))), in one of several groupings and operand orders."""
    cubes = {
        "xx*x": lambda: op(Op.MUL, op(Op.MUL, x, x), x),
        "x*xx": lambda: op(Op.MUL, x, op(Op.MUL, x, x)),
        "pow": lambda: op(Op.POW, x, const(3.0)),
    }
    x3 = cubes[cube]()
    if order == "frontend":
        inner = op(Op.ADD, x, op(Op.MUL, const(k), x3))
        t = op(Op.TANH, op(Op.MUL, const(C), inner))
        onep = op(Op.ADD, const(1.0), t)
        y = op(Op.MUL, op(Op.MUL, const(half), x), onep)
    else:  # every operand order flipped and the product grouped the other way
        inner = op(Op.ADD, op(Op.MUL, x3, const(k)), x)
        t = op(Op.TANH, op(Op.MUL, inner, const(C)))
        onep = op(Op.ADD, t, const(1.0))
        y = op(Op.MUL, x, op(Op.MUL, onep, const(half)))
    return {"y": y, "cube": x3, "tanh": t, "one_plus": onep}


def _x_graph(build, x: Node | None = None, **kw) -> tuple[Graph, dict[str, Node]]:
    a = inp("a", "batch", 4, "seq")
    parts = build(a if x is None else x(a), **kw)
    return graph([a], y=parts["y"]), parts


@pytest.mark.parametrize("order", ["frontend", "flipped"])
@pytest.mark.parametrize("cube", ["xx*x", "x*xx", "pow"])
def test_tanh_spellings_fuse(order: str, cube: str) -> None:
    before, _ = _x_graph(tanh_gelu, order=order, cube=cube)
    refusals: list = []
    after, changed = gelu_fusion(before, refusals)
    assert changed and not refusals
    (g,) = nodes_of(after, Op.GELU)
    assert g.attrs == {"approximate": "tanh"} and g.src[0] is before.inputs[0]
    assert len(after.nodes()) == 2
    assert_same(before, after, random_inputs(before, SIZES), {})


def test_an_x_that_is_itself_a_product_stays_whole() -> None:
    before, _ = _x_graph(tanh_gelu, x=lambda a: op(Op.MUL, a, op(Op.ABS, a)))
    after, changed = gelu_fusion(before)
    (g,) = nodes_of(after, Op.GELU)
    assert changed and g.src[0].op is Op.MUL
    assert_same(before, after, random_inputs(before, SIZES), {})


@pytest.mark.parametrize("scaled", ["div", "mul"])
def test_erf_spellings_fuse(scaled: str) -> None:
    x = inp("a", "batch", 4)
    arg = op(Op.DIV, x, const(math.sqrt(2))) if scaled == "div" else op(Op.MUL, const(1 / math.sqrt(2)), x)
    y = op(Op.MUL, const(0.5), op(Op.MUL, x, op(Op.ADD, op(Op.ERF, arg), const(1.0))))
    before = graph([x], y=y)
    after, changed = gelu_fusion(before)
    (g,) = nodes_of(after, Op.GELU)
    assert changed and g.attrs == {"approximate": "none"}
    assert_same(before, after, random_inputs(before, SIZES), random_params(before))


# --- refusals ---------------------------------------------------------------------------------


def _refused(before: Graph) -> str:
    refusals: list = []
    after, changed = gelu_fusion(before, refusals)
    verify(after)
    assert not changed and after.outputs[0][1] is before.outputs[0][1]
    assert not nodes_of(after, Op.GELU)
    assert len(refusals) == 1 and refusals[0][0] == "gelu"
    return refusals[0][1]


def test_a_wrong_cubic_coefficient_is_refused_by_name() -> None:
    why = _refused(_x_graph(tanh_gelu, k=0.04)[0])
    assert why == "the cubic coefficient is 0.04, not 0.044715: this is not GELU"


def test_a_wrong_half_is_refused() -> None:
    assert _refused(_x_graph(tanh_gelu, half=0.25)[0]).startswith("the factor 0.5 is 0.25")


def test_constants_within_1e_6_are_accepted() -> None:
    before, _ = _x_graph(tanh_gelu, k=0.044715 + 5e-7)
    assert gelu_fusion(before)[1]


@pytest.mark.parametrize("part,role", [
    ("cube", "the power x² or x³"),
    ("tanh", "the activation tanh(…)"),
    ("one_plus", "the sum 1 + tanh(…)"),
])
def test_an_intermediate_read_elsewhere_is_refused(part: str, role: str) -> None:
    g, parts = _x_graph(tanh_gelu)
    g.outputs.append((part, parts[part]))
    why = _refused(g)
    assert why.startswith(role) and why.endswith("is also used outside the GELU")


def test_gpt2_with_its_cube_read_elsewhere_keeps_that_layers_formula() -> None:
    g = prepared(small("gpt2").graph, True)
    cube = next(n for n in g.nodes() if n.op is Op.MUL and n.src[0].op is Op.MUL and n.src[0].src[0] is n.src[1])
    g = Graph(g.inputs, [*g.outputs, ("cube", cube)], g.meta)
    refusals: list = []
    after, changed = gelu_fusion(g, refusals)
    verify(after)
    assert changed and len(nodes_of(after, Op.GELU)) == L - 1 and ops(after)[Op.TANH] == 1
    assert [r[0] for r in refusals] == ["gelu"] and "variants.alg:" in str(refusals[0][2])


def test_no_half_means_no_gelu_and_no_refusal() -> None:
    a = inp("a", "batch", 4)
    y = op(Op.MUL, a, op(Op.ADD, const(1.0), op(Op.TANH, a)))
    refusals: list = []
    after, changed = gelu_fusion(graph([a], y=y), refusals)
    assert not changed and not refusals


# --- as Before/Expected IR text ------------------------------------------------------------------


def test_gpt2_gelu_tanh_as_ir_text() -> None:
    """variants.alg's GELU_tanh as the frontend lowers it (then cse and simplify) becomes one gelu op."""
    before = """
        graph GELU_tanh(x: float32[batch]) -> (y: float32[batch])
          %1 = const 0.5 : float32[]
          %2 = mul %1, %x : float32[batch]
          %3 = const 1.0 : float32[]
          %4 = const 0.7978845608028654 : float32[]
          %5 = const 0.044715 : float32[]
          %6 = mul %x, %x : float32[batch]
          %7 = mul %6, %x : float32[batch]
          %8 = mul %5, %7 : float32[batch]
          %9 = add %x, %8 : float32[batch]
          %10 = mul %4, %9 : float32[batch]
          %11 = tanh %10 : float32[batch]
          %12 = add %3, %11 : float32[batch]
          %13 = mul %2, %12 : float32[batch]
          return y = %13
    """
    model = load("models/variants.alg", entry="GELU_tanh", config="/dev/null")
    assert text(prepared(model.graph, True)) == text(ir.parse(textwrap.dedent(before)))
    check_rewrite(gelu_fusion, before, """
        graph GELU_tanh(x: float32[batch]) -> (y: float32[batch])
          %1 = gelu %x {approximate="tanh"} : float32[batch]
          return y = %1
    """, tol=1e-6)
