"""Joins and slices, selection (max/min/argmax over an index, min/max of two values), sigmoid and elu, and
prefix sums (issue 27): each against numpy written from the formula, on the interpreter and ONNX Runtime,
in its Unicode, ASCII and LaTeX spellings, and each misuse as one located diagnostic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pseudoformer.base.errors import CompileError
from pseudoformer.ir import Op
from pseudoformer.model import check, load
from pseudoformer.optimize import optimize
from tests.frontend.notation_run import run_both, write

RNG = np.random.default_rng(27)


def assert_one_error(path: Path, at: tuple[int, int], message: str) -> None:
    """`check` reports one mistake, at line and column `at`, whose message holds `message`."""
    with pytest.raises(CompileError) as info:
        check(path)
    (err,) = info.value.errors
    assert (err.pos.line, err.pos.col) == at and message in err.message, err.render()

JOINS = """Algorithm: Y ← Join(E | x_cls, W_p)
  Input: E ∈ ℝ^{d × N}, patch embeddings.
  Output: Y ∈ ℝ^{2d × N + 1}
  Parameters: x_cls ∈ ℝ^{d}, W_p ∈ ℝ^{d × N + 1}
  1 X ← [x_cls, E] + W_p
  2 return Y = [X; X[:, 1:N + 1] ⊙ X]
"""


def test_a_learned_column_joined_to_per_example_columns(tmp_path: Path) -> None:
    model = load(write(tmp_path, JOINS), defines=["d=3", "N=4"])
    e = RNG.standard_normal((2, 4, 3)).astype(np.float32)  # [batch, N, d]
    w = model.weights
    x = np.concatenate([np.broadcast_to(w["x_cls"], (2, 1, 3)), e], axis=1) + w["W_p"].T
    np.testing.assert_allclose(run_both(model, E=e)["Y"], np.concatenate([x, x * x], axis=2), rtol=1e-6)
    assert check(write(tmp_path, JOINS)) == ["Join"]


SLICES = """Algorithm: Y ← Slices(X, x)
  Input: X ∈ ℝ^{d × ℓ}, x ∈ ℝ^{ℓ}
  Output: Y ∈ ℝ^{d × ℓ − 1}
  Hyperparameters: k ∈ ℕ
  1 A ← X[:, 2:ℓ] − X[:, 1:ℓ − 1]
  2 B ← [X[1:1, 2:ℓ]; A[2:d, :]]
  3 return Y = B + X[1:d, 1 : ℓ − 1] + Σ_{i=1}^{k} x[ℓ − k + 1 : ℓ][i]
"""


@pytest.mark.parametrize("spelling", ["unicode", "ascii"])
def test_slices_with_bounds_of_sizes(tmp_path: Path, spelling: str) -> None:
    source = SLICES if spelling == "unicode" else SLICES.replace("∈", "in").replace("ℝ", "R").replace(
        "×", "*").replace("ℓ", "ell").replace("−", "-").replace("Σ", "sum").replace("←", "<-")
    model = load(write(tmp_path, source), defines=["d=3", "k=2"])
    xs = RNG.standard_normal((2, 5, 3)).astype(np.float32)
    v = RNG.standard_normal((2, 5)).astype(np.float32)
    m = xs.transpose(0, 2, 1)  # [batch, d, ℓ]
    a = m[:, :, 1:] - m[:, :, :-1]
    b = np.concatenate([m[:, :1, 1:], a[:, 1:]], axis=1)
    want = b + m[:, :, :-1] + v[:, -2:].sum(-1)[:, None, None]
    np.testing.assert_allclose(run_both(model, X=xs, x=v)["Y"], want.transpose(0, 2, 1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("line,col,message", [
    ("return Y = X[:, 2:ℓ + 1]", 21, "ends at 1 + ℓ, past the ℓ of its second axis"),
    ("return Y = X[:, 0:ℓ − 1]", 21, "starts at 0; positions count from 1"),
    ("return Y = X[:, 1:x[1]]", 23, "the bounds of a slice a:b are sizes or integer expressions of sizes"),
])
def test_slice_misuse(tmp_path: Path, line: str, col: int, message: str) -> None:
    assert_one_error(write(tmp_path, SLICES.split("  1 ")[0] + f"  1 {line}\n"), (5, col), message)


SELECT = """Algorithm: Y ← Select(G, X)
  Input: G ∈ ℝ^{E × ℓ}, X ∈ ℝ^{E × ℓ}
  Output: Y ∈ ℝ^{E × ℓ}
  1 for t ∈ [ℓ] : m_t ← max_{j ∈ [E]} G[j, t] − 2 (min_j G[j, t])
  2 for t ∈ [ℓ] : a_t ← argmax_{j ∈ [E]} G[j, t]
  3 for j ∈ [E], t ∈ [ℓ] : Y[j, t] ← m_t + [[j = a_t]] + max(X[j, t], 0.5) − min(X[j, t], G[j, t]) + sigmoid(X[j, t]) + elu(X[j, t]) + X[a_t, t]
  4 return Y
"""
ASCII_SELECT = SELECT.replace("∈", "in").replace("ℝ", "R").replace("×", "*").replace("ℓ", "ell").replace(
    "−", "-").replace("←", "<-")
LATEX_SELECT = SELECT.replace("argmax_{j ∈ [E]}", "\\operatorname{argmax}_{j \\in [E]}").replace(
    "m_t ← max_{j ∈ [E]}", "m_t ← \\max_{j \\in [E]}").replace("min_j", "\\min_j")


@pytest.mark.parametrize("source", [SELECT, ASCII_SELECT, LATEX_SELECT], ids=["unicode", "ascii", "latex"])
def test_selection_and_elementary_functions(tmp_path: Path, source: str) -> None:
    model = load(write(tmp_path, source), defines=["E=4"])
    g = RNG.standard_normal((2, 5, 4)).astype(np.float32)  # [batch, ℓ, E]
    g[0, 0, 1] = g[0, 0, 3] = g[0, 0].max() + 1  # a tie: argmax is the first
    x = (RNG.standard_normal((2, 5, 4)) * 3).astype(np.float32)
    m = g.max(-1) - 2 * g.min(-1)
    a = g.argmax(-1)
    assert a[0, 0] == 1
    onehot = np.arange(4) == a[..., None]
    picked = np.take_along_axis(x, a[..., None], -1)
    want = (m[..., None] + onehot + np.maximum(x, 0.5) - np.minimum(x, g) + 1 / (1 + np.exp(-x))
            + np.where(x > 0, x, np.expm1(np.minimum(x, 0))) + picked)
    np.testing.assert_allclose(run_both(model, G=g, X=x)["Y"], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("line,col,message", [
    ("1 return Y = min(G, X, G)", 16, "min(a, b) takes two values; the min over an index is written min_{j ∈ [n]}"),
    ("1 for t ∈ [ℓ] : Y[:, t] ← max_{j ∈ [E]} G[1, t] + X[:, t]", 29, "max_j takes the max over j, and this term "
     "does not use j"),
])
def test_selection_misuse(tmp_path: Path, line: str, col: int, message: str) -> None:
    assert_one_error(write(tmp_path, SELECT.split("  1 ")[0] + f"  {line}\n  2 return Y\n"), (4, col), message)


PREFIX = """Algorithm: Y ← Prefix(X)
  Input: X ∈ ℝ^{d × ℓ}
  Output: Y ∈ ℝ^{d × ℓ}
  1 for t ∈ [ℓ] : Y[:, t] ← Σ_{t'=1}^{t} X[:, t'] + Σ_{u=1}^{t − 1} X[:, u] ⊙ X[:, t]
  2 return Y
"""


@pytest.mark.parametrize("spelling", ["unicode", "ascii", "latex"])
def test_prefix_sums(tmp_path: Path, spelling: str) -> None:
    source = {"unicode": PREFIX,
              "ascii": PREFIX.replace("Σ", "sum").replace("∈", "in").replace("ℝ", "R").replace("×", "*").replace(
                  "ℓ", "ell").replace("−", "-").replace("←", "<-"),
              "latex": PREFIX.replace("Σ", "\\sum").replace("∈", "\\in").replace("ℓ", "\\ell")}[spelling]
    model = load(write(tmp_path, source), defines=["d=3"])
    x = RNG.standard_normal((2, 6, 3)).astype(np.float32)  # [batch, ℓ, d]
    c = np.cumsum(x, axis=1)
    before = np.concatenate([np.zeros_like(c[:, :1]), c[:, :-1]], axis=1)
    np.testing.assert_allclose(run_both(model, X=x)["Y"], c + before * x, rtol=1e-5, atol=1e-5)


def test_a_prefix_sum_is_linear(tmp_path: Path) -> None:
    """Σ_{t'=1}^{t} X[:, t'] is one CUMSUM: no ℓ × ℓ mask, no product over the positions."""
    model = load(write(tmp_path, PREFIX.replace(" + Σ_{u=1}^{t − 1} X[:, u] ⊙ X[:, t]", "")), defines=["d=3"])
    ops = [n.op for n in optimize(model.graph, 2).nodes()]
    assert Op.CUMSUM in ops and Op.INDEX_MASK not in ops and Op.LE not in ops and Op.MATMUL not in ops
