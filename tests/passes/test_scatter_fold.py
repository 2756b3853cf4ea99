"""passes/rules/scatter_sum.py and passes/rules/scatter_add_into.py (the training step's `scatter_fold`): the
log-softmax's VJP over the loss's pick, ct − softmax(z) · Σ ct with ct a scatter-add into zeros, becomes one
scatter-add into −softmax(z) · Σ u; a gather's cotangent is scattered into the cotangent it is added to. As
Before/Expected IR text (the interpreter checks each rewrite), with the refusals."""

from __future__ import annotations

from pseudoformer import ir
from pseudoformer.passes.training_step import fold_scatters
from tests.passes.ir_text import check_rewrite, text

LOSS_BACKWARD = """
    graph g(z: float32[batch, seq, 6], i: int64[batch, seq, 1], u: float32[batch, seq, 1]) -> (d: float32[batch, seq, 6])
      %1 = log_softmax %z {axis=2} : float32[batch, seq, 6]
      %2 = const 0.0 : float32[]
      %3 = expand %2, %1 : float32[batch, seq, 6]
      %4 = scatter_add_elements %3, %i, %u {axis=2} : float32[batch, seq, 6]
      %5 = reduce_sum %4 {axes=[2], keepdims=true} : float32[batch, seq, 1]
      %6 = exp %1 : float32[batch, seq, 6]
      %7 = mul %6, %5 : float32[batch, seq, 6]
      %8 = sub %4, %7 : float32[batch, seq, 6]
      return d = %8
"""


def test_the_log_softmax_backward_of_a_pick_is_one_scatter_into_minus_softmax() -> None:
    check_rewrite(fold_scatters, LOSS_BACKWARD, """
        graph g(z: float32[batch, seq, 6], i: int64[batch, seq, 1], u: float32[batch, seq, 1]) -> (d: float32[batch, seq, 6])
          %1 = log_softmax %z {axis=2} : float32[batch, seq, 6]
          %2 = exp %1 : float32[batch, seq, 6]
          %3 = reduce_sum %u {axes=[2], keepdims=true} : float32[batch, seq, 1]
          %4 = neg %3 : float32[batch, seq, 1]
          %5 = mul %2, %4 : float32[batch, seq, 6]
          %6 = scatter_add_elements %5, %i, %u {axis=2} : float32[batch, seq, 6]
          return d = %6
    """, tol=1e-5)


def test_a_gathers_cotangent_is_scattered_into_the_other_term() -> None:
    """The embedding's gradient: the lookup's scatter-add along W_e's token axis, added to the unembedding's."""
    check_rewrite(fold_scatters, """
        graph g(m: float32[4, 7], x: int64[batch, seq], c: float32[4, batch, seq]) -> (d: float32[4, 7])
          %1 = const 0.0 : float32[]
          %2 = expand %1, %m : float32[4, 7]
          %3 = scatter_add %2, %x, %c {axis=1} : float32[4, 7]
          %4 = add %m, %3 : float32[4, 7]
          return d = %4
    """, """
        graph g(m: float32[4, 7], x: int64[batch, seq], c: float32[4, batch, seq]) -> (d: float32[4, 7])
          %1 = scatter_add %m, %x, %c {axis=1} : float32[4, 7]
          return d = %1
    """)


def test_a_scatter_subtracted_scatters_its_negated_updates() -> None:
    check_rewrite(fold_scatters, """
        graph g(m: float32[7, 4], x: int64[batch], c: float32[batch, 4]) -> (d: float32[7, 4])
          %1 = const 0.0 : float32[]
          %2 = expand %1, %m : float32[7, 4]
          %3 = scatter_add %2, %x, %c {axis=0} : float32[7, 4]
          %4 = sub %m, %3 : float32[7, 4]
          return d = %4
    """, """
        graph g(m: float32[7, 4], x: int64[batch], c: float32[batch, 4]) -> (d: float32[7, 4])
          %1 = neg %c : float32[batch, 4]
          %2 = scatter_add %m, %x, %1 {axis=0} : float32[7, 4]
          return d = %2
    """)


def test_a_scatter_read_twice_a_broadcast_term_and_data_not_zeros_are_refused() -> None:
    twice = ir.parse(LOSS_BACKWARD.replace("-> (d: float32[batch, seq, 6])",
                                           "-> (d: float32[batch, seq, 6], s: float32[batch, seq, 6])")
                     .replace("return d = %8", "return d = %8, s = %4"))
    out, changed = fold_scatters(twice, refusals := [])
    assert [r[:2] for r in refusals] == [("scatter_add_into", "the scatter is also read elsewhere, so writing it "
                                          "into the other term would compute it twice")]
    assert changed  # the sum of the updates still replaces the sum of the scatter
    broadcast = ir.parse("""
        graph g(m: float32[1, 4], x: int64[batch], c: float32[batch, 4], w: float32[7, 4]) -> (d: float32[7, 4])
          %1 = const 0.0 : float32[]
          %2 = expand %1, %w : float32[7, 4]
          %3 = scatter_add %2, %x, %c {axis=0} : float32[7, 4]
          %4 = add %m, %3 : float32[7, 4]
          return d = %4
    """)
    out, changed = fold_scatters(broadcast, refusals := [])
    assert not changed and text(out) == text(broadcast)
    assert [r[0] for r in refusals] == ["scatter_add_into"] and "not of the scatter's shape" in refusals[0][1]
    into_data = ir.parse(LOSS_BACKWARD.replace("%3 = expand %2, %1", "%3 = exp %z"))
    out, changed = fold_scatters(into_data, refusals := [])
    assert not changed
    assert [r[:2] for r in refusals] == [("scatter_sum", "the scatter adds into data that is not zeros, whose sum "
                                          "would be needed too")]
