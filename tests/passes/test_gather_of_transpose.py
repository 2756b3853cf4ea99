"""passes/rules/gather_of_transpose.py (the "training" pipeline): a gather from a transpose (the paper's
embedding W_e ∈ ℝ^{d_e × N_V} looked up by rows of W_eᵀ) → the gather from W as stored, its result transposed,
as Before/Expected IR text; and through the autodiff, the embedding's gradient needs no transposed table."""

from __future__ import annotations

from pseudoformer.passes.fusions import gather_of_transpose_fusion
from tests.passes.ir_text import check_rewrite


def test_an_embedding_lookup_gathers_along_the_stored_token_axis() -> None:
    check_rewrite(gather_of_transpose_fusion, """
        graph g(W: float32[4, 7], x: int64[batch, seq]) -> (y: float32[batch, seq, 4])
          %1 = transpose %W {perm=[1, 0]} : float32[7, 4]
          %2 = gather %1, %x {axis=0} : float32[batch, seq, 4]
          return y = %2
    """, """
        graph g(W: float32[4, 7], x: int64[batch, seq]) -> (y: float32[batch, seq, 4])
          %1 = gather %W, %x {axis=1} : float32[4, batch, seq]
          %2 = transpose %1 {perm=[1, 2, 0]} : float32[batch, seq, 4]
          return y = %2
    """)


def test_any_permutation_and_axis() -> None:
    """W [5, 3, 6] read as [6, 5, 3], gathered on its middle axis (W's axis 0) by a vector of indices."""
    check_rewrite(gather_of_transpose_fusion, """
        graph g(W: float32[5, 3, 6], x: int64[seq]) -> (y: float32[6, seq, 3])
          %1 = transpose %W {perm=[2, 0, 1]} : float32[6, 5, 3]
          %2 = gather %1, %x {axis=1} : float32[6, seq, 3]
          return y = %2
    """, """
        graph g(W: float32[5, 3, 6], x: int64[seq]) -> (y: float32[6, seq, 3])
          %1 = gather %W, %x {axis=0} : float32[seq, 3, 6]
          %2 = transpose %1 {perm=[2, 0, 1]} : float32[6, seq, 3]
          return y = %2
    """)
