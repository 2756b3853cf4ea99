"""Head batching: the fused heads of Algorithm 5 become one projection per input and one 4-D ATTENTION,
in the interpreter and through ONNX Runtime, and it refuses heads that do not form one batch."""

from __future__ import annotations

import textwrap  # noqa: F401
from collections import Counter

import numpy as np
import pytest

from pseudoformer import ir  # noqa: F401
from pseudoformer.backends.onnx import to_onnx
from pseudoformer.backends.onnx.runner import OnnxRunner
from pseudoformer.config import resolve
from pseudoformer.frontend.entry import elaborate
from pseudoformer.frontend.modules import load_program
from pseudoformer.ir import DType, Op
from pseudoformer.ir.interpreter import run
from pseudoformer.ir.verify import verify
from pseudoformer.model import resolve_source
from pseudoformer.passes.fusions import attention_fusion
from pseudoformer.passes.head_batching import batch_heads
from tests.passes.attention_graphs import (
    SIZES,
    TINY,
    assert_same,
    attention_nodes,
    causal,
    cleaned,
    feeds,
    graph,
    head,
    inp,
    load_small,
    masked,
    node,
    ops,
    proj,
    random_params,
    scaled,
    self_input,
)
from tests.passes.ir_text import check_rewrite, text  # noqa: F401

ED = {k: v for k, v in TINY.items() if k != "L"} | {"L_enc": 1, "L_dec": 2}


def batched(g, refusals: list | None = None):
    fused, _ = attention_fusion(cleaned(g))
    out, changed = batch_heads(fused, refusals)
    verify(out)
    return cleaned(out), changed


def test_gpt2_small_has_one_attention_per_layer() -> None:
    src = resolve_source("models/gpt2.alg")
    cfg = resolve(src, None, None)  # GPT-2 small: L = H = 12
    g = elaborate(load_program(src), cfg.entry, cfg.hyperparameters, optional=cfg.optional)
    refusals: list = []
    out, changed = batched(g, refusals)
    atts = attention_nodes(out)
    assert changed and not refusals
    assert len(atts) == cfg.hyperparameters["L"] == 12
    assert all(a.type.rank == 4 and all(s.type.rank == 4 for s in a.src[:3]) for a in atts)
    assert all(a.shape == ("batch", 12, "seq", 64) and a.attrs["causal"] and len(a.src) == 3 for a in atts)


def test_gpt2_packs_q_k_v_into_one_projection_with_the_checkpoint_names() -> None:
    m = load_small("models/gpt2.alg", **TINY, eps=1e-5)
    out, _ = batched(m.graph)
    stacks = [n for n in out.nodes() if n.op is Op.CONCAT and n.src[0].op is Op.PARAM and n.type.rank == 2]
    assert len(stacks) == TINY["L"]
    names = [p.attrs["name"] for p in stacks[0].src]
    heads = range(TINY["H"])
    assert names == [f"layers.0.W.heads.{h}.W_{k}" for k in "qkv" for h in heads]
    assert {p.attrs["name"] for p in out.params()} == set(m.weights)  # no new weights to store or load
    # one projection matmul per layer for all of Q, K, V, then W_o, the two MLP matmuls; the unembedding
    assert ops(out)[Op.MATMUL] == 4 * TINY["L"] + 1


@pytest.mark.parametrize("batch,seq", SIZES)
def test_gpt2_batched_means_the_same(batch: int, seq: int) -> None:
    m = load_small("models/gpt2.alg", **TINY, eps=1e-5)
    out, _ = batched(m.graph)
    assert_same(m.graph, out, feeds(m.graph, batch, seq), m.weights)


def test_bert_batches_without_a_mask() -> None:
    m = load_small("models/bert.alg", "BERT", **TINY, eps=1e-12, d_f=TINY["d_e"])
    out, _ = batched(m.graph)
    atts = attention_nodes(out)
    assert len(atts) == TINY["L"] and all(a.type.rank == 4 and not a.attrs["causal"] and len(a.src) == 3
                                          for a in atts)
    for batch, seq in SIZES:
        assert_same(m.graph, out, feeds(m.graph, batch, seq), m.weights)


def test_edtransformer_batches_self_and_cross_attention() -> None:
    m = load_small("models/paper/edtransformer.alg", **ED)
    out, _ = batched(m.graph)
    atts = attention_nodes(out)
    assert len(atts) == ED["L_enc"] + 2 * ED["L_dec"]
    kinds = Counter((a.src[0].shape[-2], a.src[1].shape[-2], a.attrs["causal"]) for a in atts)
    assert kinds == {("seq_z", "seq_z", False): 1, ("seq_x", "seq_x", True): 2, ("seq_x", "seq_z", False): 2}
    for batch, lx, lz in [(1, 1, 1), (2, 3, 6), (2, 7, 2)]:
        assert_same(m.graph, out, feeds(m.graph, batch, 0, seq_x=lx, seq_z=lz), m.weights)


def test_alg5_heads_share_the_mask_operand() -> None:
    m = load_small("models/paper/primitives.alg", "MHAttention", d_x=3, d_z=4, d_attn=2, d_mid=2, d_out=3, H=3)
    out, _ = batched(m.graph)
    (att,) = attention_nodes(out)
    assert att.type.rank == 4 and att.src[3] is out.input("Mask")
    for lx, lz in [(1, 1), (4, 4), (2, 5)]:
        assert_same(m.graph, out, feeds(m.graph, 2, 0, ell_x=lx, ell_z=lz), m.weights)


ONNX_CASES = {
    "gpt2": ("models/gpt2.alg", None, TINY | {"eps": 1e-5}, {}),
    "edtransformer": ("models/paper/edtransformer.alg", None, ED, {"seq_z": 6}),
    "alg5": ("models/paper/primitives.alg", "MHAttention",
             dict(d_x=3, d_z=4, d_attn=2, d_mid=2, d_out=3, H=3), {"ell_z": 3}),
}


@pytest.mark.parametrize("name", sorted(ONNX_CASES))
def test_onnx_of_the_batched_graph(name: str) -> None:
    pytest.importorskip("onnxruntime")
    source, entry, hyper, lengths = ONNX_CASES[name]
    m = load_small(source, entry, **hyper)
    out, _ = batched(m.graph)
    model = to_onnx(out, m.weights)
    types = Counter(n.op_type for n in model.graph.node)
    assert types["Attention"] == len(attention_nodes(out)) > 0
    assert types["Softmax"] == ops(out)[Op.SOFTMAX]  # only the models' own output softmaxes are left
    runner = OnnxRunner(model)
    for batch, seq in SIZES:
        feed = feeds(m.graph, batch, seq, seed=batch + seq, **lengths)
        want, got = run(m.graph, feed, m.weights), runner.run(feed)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5, err_msg=f"{name} {k}")


# --- refusals -----------------------------------------------------------------------------------------


def _refused(g, why: str) -> None:
    fused, _ = attention_fusion(g)
    assert len(attention_nodes(fused)) > 0
    refusals: list = []
    out, changed = batch_heads(fused, refusals)
    assert not changed and out.outputs[0][1] is fused.outputs[0][1]
    assert [r[0] for r in refusals] == ["head_batching"]
    assert why in refusals[0][1], refusals[0][1]


def _stack(*heads):
    return node(Op.CONCAT, *heads, axis=1)


X = self_input()


def test_refuses_one_head() -> None:
    m = load_small("models/gpt2.alg", **TINY | {"L": 1, "H": 1, "d_mid": 4}, eps=1e-5)
    _refused(cleaned(m.graph), "one head")


def test_refuses_heads_masked_differently() -> None:
    causal_head = head("h0", X, X, lambda s: scaled(masked(causal(X), s)))
    _refused(graph([X], _stack(causal_head, head("h1", X, X))), "scale/causal")
    keep = inp("M", ("seq", "seq"), DType.bool)
    _refused(graph([X, keep], _stack(head("h0", X, X, lambda s: scaled(masked(keep, s))), head("h1", X, X))),
             "is not masked and head 1 is")


def test_heads_masked_differently_batch_with_their_masks_stacked() -> None:
    other = head("h1", X, X, lambda s: scaled(masked(causal(X, "<"), s)))
    g = graph([X], _stack(head("h0", X, X, lambda s: scaled(masked(causal(X, ">="), s))), other))
    fused, _ = attention_fusion(g)
    out, changed = batch_heads(fused)
    (att,) = attention_nodes(out)
    assert changed and att.src[3].shape == (2, "seq", "seq")
    assert_same(g, out, feeds(g, 2, 5), random_params(g))


def test_refuses_heads_reading_different_inputs() -> None:
    z = inp("Z", ("batch", 4, "seq"))
    _refused(graph([X, z], _stack(head("h0", X, X), head("h1", X, z))), "reads another input")


def test_refuses_heads_of_different_sizes() -> None:
    _refused(graph([X], _stack(head("h0", X, X), head("h1", X, X, d_attn=3))), "differs in size")


def test_refuses_a_head_used_outside_the_stack() -> None:
    h0 = head("h0", X, X)
    fused, _ = attention_fusion(graph([X], _stack(h0, head("h1", X, X)), h0))
    refusals: list = []
    out, changed = batch_heads(fused, refusals)
    assert not changed and "outside the heads' row stack" in refusals[0][1]


def test_refuses_a_query_that_is_not_a_projection() -> None:
    k, v = proj("h1.k", X, 4), proj("h1.v", X, 3)
    unprojected = node(Op.MATMUL, v, node(Op.SOFTMAX, scaled(node(Op.MATMUL, node(Op.TRANSPOSE, k, perm=[0, 2, 1]),
                                                                    X)), axis=1))
    _refused(graph([X], _stack(head("h0", X, X, d_attn=4), unprojected)), "not a projection")


def test_batched_heads_keep_bool_masks_bool() -> None:
    keep = inp("M", ("seq", "seq"), DType.bool)
    heads = [head(f"h{i}", X, X, lambda s: scaled(masked(keep, s))) for i in range(2)]
    g = graph([X, keep], _stack(*heads))
    out, changed = batched(g)
    (att,) = attention_nodes(out)
    assert changed and att.src[3].dtype is DType.bool and att.type.rank == 4
    assert_same(g, out, feeds(g, 2, 5), random_params(g))


def test_two_heads_as_ir_text() -> None:
    """Two fused heads of one input, row-stacked → one stacked projection, one 4-D attention (the slice
    bounds are CSE's to share, which runs next in -O2)."""
    check_rewrite(batch_heads, """
          graph mha(X: float32[batch, 3, seq]) -> (Y: float32[batch, 4, seq])
            %1 = param "W_q1" : float32[2, 3]
            %2 = matmul %1, %X : float32[batch, 2, seq]
            %3 = transpose %2 {perm=[0, 2, 1]} : float32[batch, seq, 2]
            %4 = param "W_k1" : float32[2, 3]
            %5 = matmul %4, %X : float32[batch, 2, seq]
            %6 = transpose %5 {perm=[0, 2, 1]} : float32[batch, seq, 2]
            %7 = param "W_v1" : float32[2, 3]
            %8 = matmul %7, %X : float32[batch, 2, seq]
            %9 = transpose %8 {perm=[0, 2, 1]} : float32[batch, seq, 2]
            %10 = attention %3, %6, %9 {causal=true, scale=0.7071067811865475} : float32[batch, seq, 2]
            %11 = transpose %10 {perm=[0, 2, 1]} : float32[batch, 2, seq]
            %12 = param "W_q2" : float32[2, 3]
            %13 = matmul %12, %X : float32[batch, 2, seq]
            %14 = transpose %13 {perm=[0, 2, 1]} : float32[batch, seq, 2]
            %15 = param "W_k2" : float32[2, 3]
            %16 = matmul %15, %X : float32[batch, 2, seq]
            %17 = transpose %16 {perm=[0, 2, 1]} : float32[batch, seq, 2]
            %18 = param "W_v2" : float32[2, 3]
            %19 = matmul %18, %X : float32[batch, 2, seq]
            %20 = transpose %19 {perm=[0, 2, 1]} : float32[batch, seq, 2]
            %21 = attention %14, %17, %20 {causal=true, scale=0.7071067811865475} : float32[batch, seq, 2]
            %22 = transpose %21 {perm=[0, 2, 1]} : float32[batch, 2, seq]
            %23 = concat %11, %22 {axis=1} : float32[batch, 4, seq]
            return Y = %23
    """, """
        graph mha(X: float32[batch, 3, seq]) -> (Y: float32[batch, 4, seq])
          %1 = param "W_q1" : float32[2, 3]
          %2 = param "W_q2" : float32[2, 3]
          %3 = param "W_k1" : float32[2, 3]
          %4 = param "W_k2" : float32[2, 3]
          %5 = param "W_v1" : float32[2, 3]
          %6 = param "W_v2" : float32[2, 3]
          %7 = concat %1, %2, %3, %4, %5, %6 {axis=0} : float32[12, 3]
          %8 = matmul %7, %X : float32[batch, 12, seq]
          %9 = const 0 : int64[]
          %10 = const 4 : int64[]
          %11 = slice %8, %9, %10 {axis=1, dim=4} : float32[batch, 4, seq]
          %12 = reshape %11 {shape=["batch", 2, 2, "seq"]} : float32[batch, 2, 2, seq]
          %13 = transpose %12 {perm=[0, 1, 3, 2]} : float32[batch, 2, seq, 2]
          %14 = const 4 : int64[]
          %15 = const 8 : int64[]
          %16 = slice %8, %14, %15 {axis=1, dim=4} : float32[batch, 4, seq]
          %17 = reshape %16 {shape=["batch", 2, 2, "seq"]} : float32[batch, 2, 2, seq]
          %18 = transpose %17 {perm=[0, 1, 3, 2]} : float32[batch, 2, seq, 2]
          %19 = const 8 : int64[]
          %20 = const 12 : int64[]
          %21 = slice %8, %19, %20 {axis=1, dim=4} : float32[batch, 4, seq]
          %22 = reshape %21 {shape=["batch", 2, 2, "seq"]} : float32[batch, 2, 2, seq]
          %23 = transpose %22 {perm=[0, 1, 3, 2]} : float32[batch, 2, seq, 2]
          %24 = attention %13, %18, %23 {causal=true, scale=0.7071067811865475} : float32[batch, 2, seq, 2]
          %25 = transpose %24 {perm=[0, 1, 3, 2]} : float32[batch, 2, 2, seq]
          %26 = reshape %25 {shape=["batch", 4, "seq"]} : float32[batch, 4, seq]
          return Y = %26
    """, tol=1e-5)
