"""passes/rules/batched_weight_gradient.py: Σ_b a_bᵀ c_b (a weight's gradient over a batch, as the VJP of a
product with a shared weight writes it) → one product over the B·ℓ rows, as Before/Expected IR text, and its
refusals."""

from __future__ import annotations

from pseudoformer import ir
from pseudoformer.ir import Op
from pseudoformer.passes.training_step import fold_batched_gradients
from tests.passes.ir_text import check_rewrite, text

BEFORE = """
    graph grad(a: float32[batch, seq, 3], c: float32[batch, seq, 4]) -> (g: float32[3, 4])
      %1 = transpose %a {perm=[0, 2, 1]} : float32[batch, 3, seq]
      %2 = matmul %1, %c : float32[batch, 3, 4]
      %3 = reduce_sum %2 {axes=[0], keepdims=false} : float32[3, 4]
      return g = %3
"""


def test_a_weight_gradient_over_a_batch_becomes_one_product_over_its_rows() -> None:
    check_rewrite(fold_batched_gradients, BEFORE, """
        graph grad(a: float32[batch, seq, 3], c: float32[batch, seq, 4]) -> (g: float32[3, 4])
          %1 = flatten %a {axis=2} : float32[batch*seq, 3]
          %2 = transpose %1 {perm=[1, 0]} : float32[3, batch*seq]
          %3 = flatten %c {axis=2} : float32[batch*seq, 4]
          %4 = matmul %2, %3 : float32[3, 4]
          return g = %4
    """, tol=1e-5)


def _refusal(before: str) -> str:
    g = ir.parse(before)
    out, changed = fold_batched_gradients(g, refusals := [])
    assert not changed and text(out) == text(g)
    ((rule, why, _, _),) = refusals
    assert rule == "batched_weight_gradient"
    return why


def test_operands_broadcast_against_each_other_are_refused() -> None:
    """One a for every batch entry: its rows would not pair with c's."""
    why = _refusal(BEFORE.replace("a: float32[batch, seq, 3]", "a: float32[1, seq, 3]")
                   .replace("float32[batch, 3, seq]", "float32[1, 3, seq]"))
    assert "rows do not pair up" in why


def test_a_batched_product_read_elsewhere_is_refused() -> None:
    why = _refusal(BEFORE.replace("-> (g: float32[3, 4])", "-> (g: float32[3, 4], p: float32[batch, 3, 4])")
                   .replace("return g = %3", "return g = %3, p = %2"))
    assert "compute it twice" in why


def test_other_sums_are_not_matched() -> None:
    """A sum over another axis, or one that keeps the batch axis, is not a weight's gradient."""
    for before in (BEFORE.replace("{axes=[0], keepdims=false} : float32[3, 4]", "{axes=[1], keepdims=false} : float32[batch, 4]")
                   .replace("(g: float32[3, 4])", "(g: float32[batch, 4])"),
                   BEFORE.replace("{axes=[0], keepdims=false} : float32[3, 4]", "{axes=[0], keepdims=true} : float32[1, 3, 4]")
                   .replace("(g: float32[3, 4])", "(g: float32[1, 3, 4])")):
        g = ir.parse(before)
        out, changed = fold_batched_gradients(g, refusals := [])
        assert not changed and not refusals and Op.FLATTEN not in {n.op for n in out.nodes()}
