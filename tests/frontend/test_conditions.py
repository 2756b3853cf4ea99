"""Conditions: parentheses, ∧ ∨ ¬ and comparisons of computed integers, in Iverson brackets and `if`,
each checked against numpy on the interpreter and ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pseudoformer.base.errors import CompileError
from pseudoformer.frontend.entry import elaborate
from pseudoformer.frontend.modules import load_program
from pseudoformer.ir.printer import format_graph
from pseudoformer.model import load
from tests.frontend.notation_run import compile_source, run_both, write

RNG = np.random.default_rng(6)

WINDOW = """Algorithm: S ← Window(X)
  Input: X ∈ ℝ^{d × ℓ}
  Output: S ∈ ℝ^{ℓ × ℓ}
  Hyperparameters: d, w ∈ ℕ
  1 S ← Xᵀ X
  2 ∀t, t' : if ¬(t ≤ t' ∧ t' − t < w) then S[t, t'] ← 0
  3 return S
"""


@pytest.mark.parametrize("ell", [1, 6])
def test_a_parenthesised_sliding_window_condition(tmp_path: Path, ell: int) -> None:
    model = compile_source(tmp_path, WINDOW, d=3, w=3)
    X = RNG.standard_normal((2, ell, 3)).astype(np.float32)
    got = run_both(model, X=X)["S"]
    t = np.arange(1, ell + 1)
    keep = (t[:, None] <= t[None, :]) & (t[None, :] - t[:, None] < 3)  # [t, t′]
    for b in range(2):
        np.testing.assert_allclose(got[b], np.where(keep, X[b] @ X[b].T, 0).T, rtol=1e-5, atol=1e-6)


ENDS = """Algorithm: y ← Ends(x)
  Input: x ∈ ℝ^{ℓ}
  Output: y ∈ ℝ^{ℓ}
  1 for t ∈ [ℓ] : y[t] ← x[t] + [[(t = 1 ∨ t = ℓ) ∧ ¬(t mod 2 = 0)]] + 10 [[¬((t > 2) ∨ ¬(t ≥ 2))]]
  2 return y
"""


@pytest.mark.parametrize("ell", [1, 4, 5])
def test_nested_parentheses_and_or_not_in_an_iverson_bracket(tmp_path: Path, ell: int) -> None:
    model = compile_source(tmp_path, ENDS)
    x = RNG.standard_normal((1, ell)).astype(np.float32)
    t = np.arange(1, ell + 1)
    want = x + (((t == 1) | (t == ell)) & ~(t % 2 == 0)) + 10 * (t == 2)
    np.testing.assert_allclose(run_both(model, x=x)["y"], want, rtol=1e-6)


BLOCKS = """Algorithm: S ← Masked(X | Mask)
  Input: X ∈ ℝ^{d × ℓ}
  Output: S ∈ ℝ^{ℓ × ℓ}
  Hyperparameters: d ∈ ℕ, Mask ∈ {0,1}^{ℓ × ℓ}
  1 S ← Xᵀ X
  2 ∀t, t' : if ¬Mask[t, t'] then S[t, t'] ← −∞
  3 return S = softmax(S)

Algorithm: S ← Blocks(X)
  Input: X ∈ ℝ^{d × ℓ}
  Output: S ∈ ℝ^{ℓ × ℓ}
  Hyperparameters: d, b ∈ ℕ
  1 return S = Masked(X | Mask[t, t'] = [[⌊(t − 1)/b⌋ = ⌊(t' − 1)/b⌋ ∧ (t ≤ t')]])
"""


def test_comparisons_of_computed_integers_define_a_mask(tmp_path: Path) -> None:
    model = load(write(tmp_path, BLOCKS), entry="Blocks", defines=["d=2", "b=3"])
    X = RNG.standard_normal((1, 8, 2)).astype(np.float32)
    got = run_both(model, X=X)["S"][0]
    t = np.arange(1, 9)
    keep = ((t[:, None] - 1) // 3 == (t[None, :] - 1) // 3) & (t[:, None] <= t[None, :])
    S = np.where(keep, X[0] @ X[0].T, -np.inf)
    want = np.exp(S - S.max(0)) / np.exp(S - S.max(0)).sum(0)
    np.testing.assert_allclose(got, want.T, rtol=1e-5, atol=1e-6)


def test_three_spellings_of_a_parenthesised_condition_agree(tmp_path: Path) -> None:
    lines = {"unicode": "∀t, t' : if ¬(t ≤ t' ∧ t' − t < w) ∨ (t = 1) then S[t, t'] ← 0",
             "ascii": "forall t, t' : if not (t <= t' and t' - t < w) or (t == 1) then S[t, t'] <- 0",
             "latex": r"\forall t, t' : if \neg (t \le t' \land t' - t < w) \lor (t = 1) then S[t, t'] \gets 0"}
    texts = []
    for style, line in lines.items():
        src = WINDOW.replace(WINDOW.splitlines()[5], f"  2 {line}")
        graph = elaborate(load_program(write(tmp_path, src, f"{style}.alg")), None, {"d": 2, "w": 2})
        texts.append(format_graph(graph, with_locations=False))
    assert texts[0] == texts[1] == texts[2]
    assert "= or " in texts[0] and "= not " in texts[0]


def test_checking_without_a_config(tmp_path: Path) -> None:
    from pseudoformer.model import check

    for src in (WINDOW, ENDS, BLOCKS):
        check(write(tmp_path, src))


@pytest.mark.parametrize("line,col,message", [
    ("2 ∀t, t' : if (t' − t) then S[t, t'] ← 0", 18, "not a truth value"),
    ("2 ∀t, t' : if (t ≤ t' ∧ t' < w then S[t, t'] ← 0", 34, "the '(' at column 17 is not closed"),
    ("2 ∀t, t' : if t ≤ t' && t' < w then S[t, t'] ← 0", 24, "write `a ∧ b`"),
])
def test_misuse_is_one_positioned_diagnostic(tmp_path: Path, line: str, col: int, message: str) -> None:
    src = WINDOW.replace(WINDOW.splitlines()[5], f"  {line}")
    with pytest.raises(CompileError) as info:
        compile_source(tmp_path, src, d=2, w=2)
    (err,) = info.value.errors
    assert message in str(err) and (err.pos.line, err.pos.col) == (6, col), str(err)


REVERSED = """Algorithm: S ← Reversed(X)
  Input: X ∈ ℝ^{d × ℓ}
  Output: S ∈ ℝ^{ℓ × ℓ}
  Hyperparameters: d ∈ ℕ
  1 S ← Xᵀ X
  2 ∀t_z, t_x : S[t_z, t_x] ← 0.5 (t_z − t_x) − S[t_z, t_x]
  3 return S
"""


@pytest.mark.parametrize("ell", [1, 5])
def test_an_update_reads_its_ranges_from_its_target_before_its_value(tmp_path: Path, ell: int) -> None:
    """The value names t_z before the S[t_z, t_x] that ranges it: the target S says how far each runs."""
    model = compile_source(tmp_path, REVERSED, d=3)
    X = RNG.standard_normal((2, ell, 3)).astype(np.float32)
    t = np.arange(1, ell + 1)
    got = run_both(model, X=X)["S"]
    for b in range(2):
        want = 0.5 * (t[:, None] - t[None, :]) - X[b] @ X[b].T  # [t_z, t_x]
        np.testing.assert_allclose(got[b], want.T, rtol=1e-5, atol=1e-5)
