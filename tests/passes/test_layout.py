"""The row-major layout pass on every model of models/ and on the fused forms other passes make.

Each model is checked literal and after CSE+simplify: the IR verifies, the interface is unchanged,
the interpreter and ONNX Runtime give the original's outputs at several sizes, a second run changes
nothing, and on the transformers the activation transposes drop to one per attention block with
every reduction, softmax and layer norm over the last axis.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest

from pseudoformer.ir import Graph, Node, Op
from pseudoformer.ir.interpreter import run
from pseudoformer.ir.verify import verify
from pseudoformer.model import Model, load
from pseudoformer.passes.layout import activation_transposes, static_nodes, to_row_major
from pseudoformer.passes.manager import passes, run_passes
from tests.passes.layout_cases import (
    feed,
    hand_params,
    ln_graph,
    mha_graph,
    row_major_graph,
    single_head_graph,
)

PRIMS = "models/paper/primitives.alg"
TINY = dict(L=2, H=2, d_e=6, d_mlp=8, d_attn=3, d_mid=3, ell_max=16, N_V=7)
MODELS: dict[str, tuple[str, str | None, dict]] = {
    "gpt2": ("models/gpt2.alg", None, TINY | {"eps": 1e-5}),
    "bert": ("models/bert.alg", "BERT", TINY | {"eps": 1e-12, "d_f": 6}),
    "bert_encoder": ("models/bert.alg", "BERTEncoder", TINY | {"eps": 1e-12}),
    "alg1_token_embedding": (PRIMS, "1", dict(d_e=6, N_V=9)),
    "alg2_positional_embedding": (PRIMS, "2", dict(d_e=6, ell_max=10)),
    "alg3_single_query_attention": (PRIMS, "3", dict(d_in=5, d_attn=4, d_out=3)),
    "alg4_attention": (PRIMS, "4", dict(d_x=6, d_z=5, d_attn=4, d_out=3)),
    "alg5_mhattention": (PRIMS, "MHAttention", dict(d_x=6, d_z=6, d_attn=2, d_mid=3, d_out=4, H=3)),
    "alg6_layer_norm": (PRIMS, "layer_norm", dict(d_e=7)),
    "alg7_unembedding": (PRIMS, "Unembedding", dict(d_e=5, N_V=11)),
    "alg8_edtransformer": ("models/paper/edtransformer.alg", None,
                           {k: v for k, v in TINY.items() if k != "L"} | {"L_enc": 1, "L_dec": 2}),
    "alg9_etransformer": ("models/paper/etransformer.alg", None, TINY | {"d_f": 6}),
    "alg10_dtransformer": ("models/paper/dtransformer.alg", None, TINY),
}
# The activation transposes left, as measured: the literal Kᵀ Q scores need K column-major, and the
# pass pays for that once per self-attention block, transposing the input K is projected from, shared
# by every head; the decoder's cross-attention blocks all read the one encoder output, transposed once.
BLOCKS = {"gpt2": 2, "bert": 2, "bert_encoder": 2, "alg9_etransformer": 2, "alg10_dtransformer": 2,
          "alg8_edtransformer": 1 + 2 + 1}
SIZES = [(1, 1), (2, 5), (3, 8)]
VARIANTS = ["literal", "cleaned"]


@functools.cache
def _model(name: str) -> Model:
    source, entry, hyper = MODELS[name]
    return load(source, entry=entry, config=os.devnull, defines=[f"{k}={v}" for k, v in hyper.items()])


@functools.cache
def _graphs(name: str, variant: str) -> tuple[Graph, Graph]:
    """(the graph the pass is given, what it makes of it)."""
    g = _model(name).graph
    if variant == "cleaned":
        p = passes()
        g = run_passes(g, [p["cse"], p["simplify"], p["cse"]])
    return g, to_row_major(g)[0]


def _assert_same(before: Graph, after: Graph, params: dict, feeds: list[dict], tol: float = 1e-5) -> None:
    for f in feeds:
        want, got = run(before, f, params), run(after, f, params)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=tol, atol=tol, err_msg=k)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_keeps_semantics_and_interface(name: str, variant: str) -> None:
    before, after = _graphs(name, variant)
    verify(after)
    assert after.inputs == before.inputs
    assert [(k, n.type) for k, n in after.outputs] == [(k, n.type) for k, n in before.outputs]
    _assert_same(before, after, _model(name).weights, [feed(before, b, s, seed=b + s) for b, s in SIZES])
    assert to_row_major(after) == (after, False), "a second run still found something to move"


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_through_onnx_runtime(name: str, variant: str) -> None:
    pytest.importorskip("onnxruntime")
    from pseudoformer.backends.onnx import OnnxRunner, to_onnx

    before, after = _graphs(name, variant)
    weights = _model(name).weights
    runner = OnnxRunner(to_onnx(after, weights))
    for b, s in SIZES:
        f = feed(before, b, s, seed=b * s)
        want, got = run(before, f, weights), runner.run(f)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5, err_msg=k)


def _reduced_axes(n: Node) -> list[int]:
    rank = n.src[0].type.rank
    if n.op in (Op.SOFTMAX, Op.LAYER_NORM):
        return [n.attrs["axis"] % rank]
    return sorted(a % rank for a in n.attrs["axes"])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_transformers_become_row_major(name: str, variant: str) -> None:
    before, after = _graphs(name, variant)
    assert activation_transposes(before) > BLOCKS[name]
    assert activation_transposes(after) <= BLOCKS[name]
    reducing = [n for n in after.nodes()
                if n.op in (Op.SOFTMAX, Op.LAYER_NORM, Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MEAN)]
    assert reducing
    for n in reducing:
        assert _reduced_axes(n) == [n.src[0].type.rank - 1], f"{n.op.value} over {_reduced_axes(n)}"
    # Activations are [batch, positions, features]: nothing data-dependent is [batch, features, positions].
    d = MODELS[name][2]["d_e"]
    static = static_nodes(after.nodes())
    for n in after.nodes():
        if id(n) not in static and n.type.rank == 3 and n.op is not Op.TRANSPOSE:
            assert n.shape[1] != d or n.shape[2] == d, f"{n.op.value} {n.type} is column-major"


def test_gpt2_counts() -> None:
    """The literal GPT-2 moves data for the embedding, every head's Kᵀ and the output; row-major, only
    the input of each layer's K projections."""
    before, after = _graphs("gpt2", "literal")
    L, H = TINY["L"], TINY["H"]
    assert activation_transposes(before) == 1 + L * H + 1
    assert activation_transposes(after) == L
    embed = [n for n in after.nodes() if n.op is Op.GATHER and n.src[0].op is not Op.INPUT]
    assert [n.attrs["axis"] for n in embed] == [0]  # GATHER(W_eᵀ, x, axis=0): [batch, seq, d]
    out = after.outputs[0][1]
    assert out.op is Op.MATMUL and out.src[1].op is Op.PARAM  # logits = X W_e, no final transpose


# --- the forms the fusion passes make -------------------------------------------------------------


def _only_param_transposes(g: Graph) -> None:
    assert activation_transposes(g) == 0, [n for n in g.nodes() if n.op is Op.TRANSPOSE]


@pytest.mark.parametrize("paper_output", [False, True])
def test_layer_norm_over_features_loses_its_transposes(paper_output: bool) -> None:
    before = ln_graph(paper_output)
    after, changed = to_row_major(before)
    assert changed
    verify(after)
    (ln,) = [n for n in after.nodes() if n.op is Op.LAYER_NORM]
    assert ln.attrs["axis"] == 2 and ln.src[0].op is Op.INPUT
    # An output in the paper's layout is the one transpose left: the interface asks for it.
    assert activation_transposes(after) == int(paper_output)
    _assert_same(before, after, hand_params(before), [feed(before, b, s, seed=s) for b, s in SIZES])


@pytest.mark.parametrize("mask", ["none", "causal", "input"])
def test_attention_fed_by_transposes_loses_them(mask: str) -> None:
    before = single_head_graph(mask)
    assert activation_transposes(before) == 6  # X in, Q K V to rows, the output back, Y out
    after, _ = to_row_major(before)
    verify(after)
    _only_param_transposes(after)
    (att,) = [n for n in after.nodes() if n.op is Op.ATTENTION]
    assert all(s.op is Op.ADD for s in att.src[:3])  # fed straight by X Wᵀ + b
    _assert_same(before, after, hand_params(before), [feed(before, b, s, seed=s) for b, s in SIZES])


def test_batched_heads_keep_only_the_head_split_transposes() -> None:
    """[b, H·d, s] → [b, H, d, s] → [b, H, s, d] is, row-major, [b, s, H·d] → [b, s, H, d] → [b, H, s, d]:
    a reshape and one transpose per q, k, v and one back, the same as a hand-written model's."""
    before = mha_graph()
    after, _ = to_row_major(before)
    verify(after)
    assert activation_transposes(before) == 6
    assert activation_transposes(after) == 4
    for n in after.nodes():
        if n.op is Op.TRANSPOSE and id(n.src[0]) not in static_nodes(after.nodes()):
            assert list(n.attrs["perm"]) == [0, 2, 1, 3]
    _assert_same(before, after, hand_params(before), [feed(before, b, s, seed=s) for b, s in SIZES])


def test_row_major_graph_is_left_alone() -> None:
    g = row_major_graph()
    assert to_row_major(g) == (g, False)
