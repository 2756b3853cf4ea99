"""The training loss's pick `log P[x[t+1], t]`: the frontend's one-hot sum becomes one gather_elements
(rules/one_hot_pick.py), a pick from a slice picks from the whole (rules/pick_before_slice.py), each computing
what the graph before computed, and the pick's gradient is a scatter-add (SCATTER_ADD_ELEMENTS), not a one-hot
of the vocabulary's size."""

from __future__ import annotations

import textwrap

import numpy as np

from pseudoformer import ir
from pseudoformer.ir import Op
from pseudoformer.ir.interpreter import run
from pseudoformer.passes.autodiff import gradients
from pseudoformer.passes.fusions import one_hot_pick_fusion, pick_before_slice_fusion
from tests.passes.ir_text import check_rewrite, random_feed

# The frontend's pick P[x[t], t] (computed_index.pick): x checked by a gather from the range, then a one-hot
# against the range, multiplied and summed over the vocabulary.
ONE_HOT = """
    graph pick(P: float32[batch, seq, 5], x: int64[batch, seq]) -> (loss: float32[batch])
      %1 = const 5 : int64[]
      %2 = arange %1 {dim=5} : int64[5]
      %3 = gather %2, %x {axis=0} : int64[batch, seq]
      %4 = unsqueeze %3 {axes=[2]} : int64[batch, seq, 1]
      %5 = eq %2, %4 : bool[batch, seq, 5]
      %6 = cast %5 {dtype=float32} : float32[batch, seq, 5]
      %7 = mul %6, %P : float32[batch, seq, 5]
      %8 = reduce_sum %7 {axes=[2], keepdims=false} : float32[batch, seq]
      %9 = reduce_sum %8 {axes=[1], keepdims=false} : float32[batch]
      return loss = %9
"""


def test_a_checked_one_hot_pick_is_one_gather_elements() -> None:
    check_rewrite(one_hot_pick_fusion, ONE_HOT, """
        graph pick(P: float32[batch, seq, 5], x: int64[batch, seq]) -> (loss: float32[batch])
          %1 = const 5 : int64[]
          %2 = arange %1 {dim=5} : int64[5]
          %3 = gather %2, %x {axis=0} : int64[batch, seq]
          %4 = unsqueeze %3 {axes=[2]} : int64[batch, seq, 1]
          %5 = gather_elements %P, %4 {axis=2} : float32[batch, seq, 1]
          %6 = squeeze %5 {axes=[2]} : float32[batch, seq]
          %7 = reduce_sum %6 {axes=[1], keepdims=false} : float32[batch]
          return loss = %7
    """)


def test_an_unchecked_index_stays_a_one_hot_sum_and_says_why() -> None:
    """Outside the range the one-hot sum picks nothing (0) where a gather fails: no rewrite without the check."""
    unchecked = ONE_HOT.replace("gather %2, %x {axis=0}", "add %x, %1")
    g = ir.parse(textwrap.dedent(unchecked))
    refusals: list = []
    out, changed = one_hot_pick_fusion(g, refusals)
    assert not changed and Op.GATHER_ELEMENTS not in [n.op for n in out.nodes()]
    assert [r[:2] for r in refusals] == [("one_hot_pick", "the index is not checked against the axis (for an index "
                                          "outside it the one-hot sum picks nothing, a gather fails)")]


def test_the_pick_gradient_is_a_scatter_add_and_agrees_with_the_one_hot() -> None:
    g = ir.parse(textwrap.dedent(ONE_HOT))
    picked, _ = one_hot_pick_fusion(g)
    feed, weights = random_feed(g)
    want = run(gradients(g, [], inputs=["P"]), feed, weights)
    grad = gradients(picked, [], inputs=["P"])
    ops = [n.op for n in grad.nodes()]
    assert Op.SCATTER_ADD_ELEMENTS in ops and Op.EQ not in ops
    got = run(grad, feed, weights)
    assert list(got) == list(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-6, err_msg=k)


def test_a_pick_from_a_slice_picks_from_the_whole() -> None:
    """The loss's P[x[t+1], t] for t < ℓ: the picks slice, not the log-softmax (the index padded with 0)."""
    check_rewrite(pick_before_slice_fusion, """
        graph sliced(P: float32[batch, seq, 5], x: int64[batch, seq]) -> (picked: float32[batch, -1 + seq, 1])
          %1 = const 0 : int64[]
          %2 = dim %P {axis=1} : int64[]
          %3 = const 1 : int64[]
          %4 = sub %2, %3 : int64[]
          %5 = slice %P, %1, %4 {axis=1, dim="-1 + seq"} : float32[batch, -1 + seq, 5]
          %6 = slice %x, %3, %2 {axis=1, dim="-1 + seq"} : int64[batch, -1 + seq]
          %7 = unsqueeze %6 {axes=[2]} : int64[batch, -1 + seq, 1]
          %8 = gather_elements %5, %7 {axis=2} : float32[batch, -1 + seq, 1]
          return picked = %8
    """, """
        graph sliced(P: float32[batch, seq, 5], x: int64[batch, seq]) -> (picked: float32[batch, -1 + seq, 1])
          %1 = const 1 : int64[]
          %2 = dim %P {axis=1} : int64[]
          %3 = slice %x, %1, %2 {axis=1, dim="-1 + seq"} : int64[batch, -1 + seq]
          %4 = unsqueeze %3 {axes=[2]} : int64[batch, -1 + seq, 1]
          %5 = const 0 : int64[]
          %6 = const 1 : int64[]
          %7 = slice %P, %5, %6 {axis=2, dim=1} : float32[batch, seq, 1]
          %8 = const 0 : int64[]
          %9 = pad %4, %7, %8 {axis=1} : int64[batch, seq, 1]
          %10 = gather_elements %P, %9 {axis=2} : float32[batch, seq, 1]
          %11 = sub %2, %1 : int64[]
          %12 = slice %10, %8, %11 {axis=1, dim="-1 + seq"} : float32[batch, -1 + seq, 1]
          return picked = %12
    """)
