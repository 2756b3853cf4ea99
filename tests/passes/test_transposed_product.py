"""passes/rules/transposed_product.py: (xᵀ y)ᵀ → yᵀ x, one transpose fewer, as Before/Expected IR text (alone,
and after rules/batched_weight_gradient.py folded a weight's gradient for a weight read transposed), and its
refusal."""

from __future__ import annotations

from pseudoformer import ir
from pseudoformer.passes.training_step import fold_batched_gradients
from tests.passes.ir_text import check_rewrite, text

BEFORE = """
    graph g(x: float32[batch, 5, 3], y: float32[batch, 5, 4]) -> (z: float32[batch, 4, 3])
      %1 = transpose %x {perm=[0, 2, 1]} : float32[batch, 3, 5]
      %2 = matmul %1, %y : float32[batch, 3, 4]
      %3 = transpose %2 {perm=[0, 2, 1]} : float32[batch, 4, 3]
      return z = %3
"""


def test_a_transposed_product_of_a_transpose_turns_round() -> None:
    check_rewrite(fold_batched_gradients, BEFORE, """
        graph g(x: float32[batch, 5, 3], y: float32[batch, 5, 4]) -> (z: float32[batch, 4, 3])
          %1 = transpose %y {perm=[0, 2, 1]} : float32[batch, 4, 5]
          %2 = matmul %1, %x : float32[batch, 4, 3]
          return z = %2
    """, tol=1e-5)


def test_the_gradient_of_a_weight_read_transposed_has_one_transpose() -> None:
    """(flatten(a)ᵀ flatten(c))ᵀ, the gradient of W in X·Wᵀ over a batch → flatten(c)ᵀ flatten(a)."""
    check_rewrite(fold_batched_gradients, """
        graph grad(a: float32[batch, seq, 3], c: float32[batch, seq, 4]) -> (g: float32[4, 3])
          %1 = transpose %a {perm=[0, 2, 1]} : float32[batch, 3, seq]
          %2 = matmul %1, %c : float32[batch, 3, 4]
          %3 = reduce_sum %2 {axes=[0], keepdims=false} : float32[3, 4]
          %4 = transpose %3 {perm=[1, 0]} : float32[4, 3]
          return g = %4
    """, """
        graph grad(a: float32[batch, seq, 3], c: float32[batch, seq, 4]) -> (g: float32[4, 3])
          %1 = flatten %c {axis=2} : float32[batch*seq, 4]
          %2 = transpose %1 {perm=[1, 0]} : float32[4, batch*seq]
          %3 = flatten %a {axis=2} : float32[batch*seq, 3]
          %4 = matmul %2, %3 : float32[4, 3]
          return g = %4
    """, tol=1e-5)


def test_a_product_also_read_untransposed_is_refused() -> None:
    g = ir.parse(BEFORE.replace("-> (z: float32[batch, 4, 3])", "-> (z: float32[batch, 4, 3], p: float32[batch, 3, 4])")
                 .replace("return z = %3", "return z = %3, p = %2"))
    out, changed = fold_batched_gradients(g, refusals := [])
    assert not changed and text(out) == text(g)
    assert [(r[0], "compute it twice" in r[1]) for r in refusals] == [("transposed_product", True)]


def test_a_transposed_product_of_no_transpose_is_left_alone() -> None:
    g = ir.parse("""
        graph g(x: float32[batch, 3, 5], y: float32[batch, 5, 4]) -> (z: float32[batch, 4, 3])
          %1 = neg %x : float32[batch, 3, 5]
          %2 = matmul %1, %y : float32[batch, 3, 4]
          %3 = transpose %2 {perm=[0, 2, 1]} : float32[batch, 4, 3]
          return z = %3
    """)
    out, changed = fold_batched_gradients(g, refusals := [])
    assert not changed and not refusals
