"""Attention fusion: every head of every model becomes one ATTENTION op with the right mask, and means the same."""

from __future__ import annotations

import math
import textwrap  # noqa: F401

import numpy as np
import pytest

from pseudoformer import ir  # noqa: F401
from pseudoformer.config import resolve
from pseudoformer.frontend.entry import elaborate
from pseudoformer.frontend.modules import load_program
from pseudoformer.ir import DType, Op
from pseudoformer.ir.verify import verify
from pseudoformer.model import resolve_source
from pseudoformer.passes.fusions import attention_fusion
from tests.passes.attention_graphs import (
    NEG_INF,
    SIZES,
    TINY,
    assert_same,
    attention_nodes,
    causal,
    cleaned,
    const,
    feeds,
    graph,
    head,
    inp,
    load_small,
    masked,
    node,
    ops,
    param,
    random_params,
    scaled,
    self_input,
)
from tests.passes.ir_text import check_rewrite, text  # noqa: F401

GONE = (Op.SOFTMAX, Op.WHERE, Op.INDEX_MASK, Op.NOT)


def fused(g):
    refusals: list = []
    out, changed = attention_fusion(cleaned(g), refusals)
    verify(out)
    return cleaned(out), changed, refusals


def test_gpt2_small_fuses_every_head_causally() -> None:
    src = resolve_source("models/gpt2.alg")
    cfg = resolve(src, None, None)  # gpt2.toml: GPT-2 small, L = H = 12; no weights needed to count
    g = elaborate(load_program(src), cfg.entry, cfg.hyperparameters, optional=cfg.optional)
    out, changed, refusals = fused(g)
    atts = attention_nodes(out)
    h = cfg.hyperparameters
    assert changed and not refusals
    assert len(atts) == h["L"] * h["H"] == 144
    assert all(a.attrs["causal"] and len(a.src) == 3 for a in atts)
    assert all(a.attrs["scale"] == pytest.approx(1 / math.sqrt(h["d_attn"])) for a in atts)
    assert not any(ops(out)[op] for op in GONE)


@pytest.mark.parametrize("batch,seq", SIZES)
def test_gpt2_fused_means_the_same(batch: int, seq: int) -> None:
    m = load_small("models/gpt2.alg", **TINY, eps=1e-5)
    out, _, _ = fused(m.graph)
    assert len(attention_nodes(out)) == TINY["L"] * TINY["H"]
    assert_same(m.graph, out, feeds(m.graph, batch, seq), m.weights)


def test_bert_fuses_without_a_mask() -> None:
    m = load_small("models/bert.alg", "BERT", **TINY, eps=1e-12, d_f=TINY["d_e"])
    out, _, refusals = fused(m.graph)
    atts = attention_nodes(out)
    assert not refusals and len(atts) == TINY["L"] * TINY["H"]
    assert all(not a.attrs["causal"] and len(a.src) == 3 for a in atts)
    assert not ops(out)[Op.SOFTMAX]
    for batch, seq in SIZES:
        assert_same(m.graph, out, feeds(m.graph, batch, seq), m.weights)


@pytest.mark.parametrize("lx,lz", [(5, 5), (3, 6), (1, 4)])
def test_alg4_mask_input_becomes_the_mask_operand(lx: int, lz: int) -> None:
    m = load_small("models/paper/primitives.alg", "4", d_x=3, d_z=2, d_attn=2, d_out=3)
    out, _, _ = fused(m.graph)
    (att,) = attention_nodes(out)
    # The interface takes Mask as [ℓ_x, ℓ_z], i.e. [s_q, s_k]: the transposes around it cancel.
    assert len(att.src) == 4 and att.src[3] is out.input("Mask") and not att.attrs["causal"]
    assert not any(ops(out)[op] for op in GONE)
    assert_same(m.graph, out, feeds(m.graph, 2, lx, ell_x=lx, ell_z=lz), m.weights)


def test_edtransformer_self_attention_is_causal_and_cross_attention_unmasked() -> None:
    hyper = {k: v for k, v in TINY.items() if k != "L"} | {"L_enc": 1, "L_dec": 2}
    m = load_small("models/paper/edtransformer.alg", **hyper)
    out, _, refusals = fused(m.graph)
    assert not refusals
    atts = attention_nodes(out)
    kinds = {(a.src[0].shape[-2], a.src[1].shape[-2], a.attrs["causal"], len(a.src)) for a in atts}
    assert kinds == {("seq_z", "seq_z", False, 3), ("seq_x", "seq_x", True, 3), ("seq_x", "seq_z", False, 3)}
    assert len(atts) == (1 + 2 + 2) * TINY["H"]
    for batch, lx, lz in [(1, 1, 1), (2, 3, 6), (2, 7, 2)]:
        assert_same(m.graph, out, feeds(m.graph, batch, 0, seq_x=lx, seq_z=lz), m.weights)


# --- the spellings the rule accepts -----------------------------------------------------------------

X = self_input()
C = causal(X)
ACCEPTED = {
    "mask then scale": (lambda s: scaled(masked(C, s)), True, 3),
    "scale then mask": (lambda s: masked(C, scaled(s)), True, 3),
    "where(M, S, −∞)": (lambda s: scaled(node(Op.WHERE, C, s, NEG_INF)), True, 3),
    "additive mask": (lambda s: scaled(node(Op.ADD, s, node(Op.WHERE, C, const(0.0), NEG_INF))), True, 3),
    "additive mask, scaled first": (
        lambda s: node(Op.ADD, node(Op.WHERE, node(Op.NOT, C), NEG_INF, const(0.0)), scaled(s)), True, 3),
    "product by 1/c": (lambda s: node(Op.MUL, const(1 / math.sqrt(2)), masked(C, s)), True, 3),
    "transposed ≥ mask": (lambda s: scaled(masked(node(Op.TRANSPOSE, causal(X, ">="), perm=[1, 0]), s)), True, 3),
    "strict mask": (lambda s: scaled(masked(causal(X, "<"), s)), False, 4),
    "two masks": (lambda s: scaled(masked(C, masked(causal(X, ">="), s))), True, 4),
    "unscaled": (lambda s: masked(C, s), True, 3),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted_spellings(name: str) -> None:
    scores, is_causal, operands = ACCEPTED[name]
    g = graph([X], head("h", X, X, scores))
    out, changed, refusals = fused(g)
    assert changed and not refusals
    (att,) = attention_nodes(out)
    assert att.attrs["causal"] == is_causal and len(att.src) == operands
    assert not ops(out)[Op.SOFTMAX]
    params = random_params(g)
    for batch, seq in SIZES[1:]:
        assert_same(g, out, feeds(g, batch, seq), params)


def test_a_general_mask_over_two_lengths() -> None:
    x, z = inp("X", ("batch", 4, "sx")), inp("Z", ("batch", 5, "sz"))
    keep = inp("M", ("sz", "sx"), DType.bool)
    g = graph([x, z, keep], head("h", x, z, lambda s: scaled(masked(keep, s))))
    out, changed, _ = fused(g)
    (att,) = attention_nodes(out)
    assert att.src[3].op is Op.TRANSPOSE and att.src[3].src[0] is keep and att.src[3].shape == ("sx", "sz")
    assert_same(g, out, feeds(g, 2, 0, sx=3, sz=6), random_params(g))


# --- refusals -----------------------------------------------------------------------------------------


def _refused(g, why: str) -> None:
    refusals: list = []
    out, changed = attention_fusion(g, refusals)
    assert not changed and out.outputs[0][1] is g.outputs[0][1]
    assert [r[0] for r in refusals] == ["attention"]
    assert why in refusals[0][1], refusals[0][1]


def test_refuses_a_softmax_over_the_queries() -> None:
    _refused(graph([X], head("h", X, X, axis=2)), "not over the keys")


def test_refuses_a_scale_that_is_not_a_constant() -> None:
    c = param("c", ())
    _refused(graph([X], head("h", X, X, lambda s: node(Op.DIV, s, c))), "non-constant")


def test_refuses_a_mask_under_a_negative_scale() -> None:
    _refused(graph([X], head("h", X, X, lambda s: node(Op.DIV, masked(C, s), const(-2.0)))), "non-positive scale")


def test_refuses_a_finite_fill() -> None:
    g = graph([X], head("h", X, X, lambda s: scaled(node(Op.WHERE, node(Op.NOT, C), const(-1e9), s))))
    _refused(g, "other than −∞")


def test_a_mask_per_batch_element_fuses_as_the_mask_operand() -> None:
    # a prefix length given per example makes the keep-mask [batch, keys, queries]
    keep = inp("M", ("batch", "seq", "seq"), DType.bool)
    g = graph([X, keep], head("h", X, X, lambda s: scaled(masked(keep, s))))
    out, changed, refusals = fused(g)
    (att,) = attention_nodes(out)
    assert changed and not refusals and len(att.src) == 4 and att.src[3].shape == ("batch", "seq", "seq")
    feed = feeds(g, 2, 5)
    feed["M"] |= np.eye(5, dtype=bool)  # every query sees some key
    assert_same(g, out, feed, random_params(g))


def test_refuses_when_the_scores_are_used_elsewhere() -> None:
    seen = []

    def scores(s):
        seen.append(s)
        return scaled(s)

    out = head("h", X, X, scores)
    _refused(graph([X], out, node(Op.REDUCE_SUM, seen[0], axes=[1])), "used elsewhere")


def test_refuses_a_bias_that_broadcasts_the_scores() -> None:
    bias = param("bias", (2, 1, 1, 1))  # it would give every example two sets of scores
    _refused(graph([X], head("h", X, X, lambda s: scaled(node(Op.ADD, s, bias)))), "do not share their batch dims")


def test_refuses_scores_subtracted_from_a_bias() -> None:
    bias = param("bias", (1, 1))
    _refused(graph([X], head("h", X, X, lambda s: scaled(node(Op.SUB, bias, s)))), "negates them")


def test_a_softmax_of_no_scores_is_left_alone() -> None:
    w = param("W", (3, 4))
    g = graph([X], node(Op.MATMUL, w, node(Op.SOFTMAX, X, axis=1)))
    out, changed = attention_fusion(g, refusals := [])
    assert not changed and [r[0] for r in refusals] == ["attention"]  # said why, and left it alone
    np.testing.assert_equal(ops(out), ops(g))


def test_one_causal_head_as_ir_text() -> None:
    """Algorithm 4's head (Kᵀ Q, [[t ≤ t']] masked to −∞, scaled, softmax over keys, V ·) → one attention."""
    check_rewrite(attention_fusion, """
        graph head(Q: float32[batch, 2, seq], K: float32[batch, 2, seq], V: float32[batch, 3, seq]) -> (Y: float32[batch, 3, seq])
          %1 = transpose %K {perm=[0, 2, 1]} : float32[batch, seq, 2]
          %2 = matmul %1, %Q : float32[batch, seq, seq]
          %3 = dim %Q {axis=2} : int64[]
          %4 = index_mask %3, %3 {dims=["seq", "seq"], rel="<="} : bool[seq, seq]
          %5 = not %4 : bool[seq, seq]
          %6 = const -inf : float32[]
          %7 = where %5, %6, %2 : float32[batch, seq, seq]
          %8 = const 1.4142135623730951 : float32[]
          %9 = div %7, %8 : float32[batch, seq, seq]
          %10 = softmax %9 {axis=1} : float32[batch, seq, seq]
          %11 = matmul %V, %10 : float32[batch, 3, seq]
          return Y = %11
    """, """
        graph head(Q: float32[batch, 2, seq], K: float32[batch, 2, seq], V: float32[batch, 3, seq]) -> (Y: float32[batch, 3, seq])
          %1 = transpose %Q {perm=[0, 2, 1]} : float32[batch, seq, 2]
          %2 = transpose %K {perm=[0, 2, 1]} : float32[batch, seq, 2]
          %3 = transpose %V {perm=[0, 2, 1]} : float32[batch, seq, 3]
          %4 = attention %1, %2, %3 {causal=true, scale=0.7071067811865475} : float32[batch, seq, 3]
          %5 = transpose %4 {perm=[0, 2, 1]} : float32[batch, 3, seq]
          return Y = %5
    """, tol=1e-5)
