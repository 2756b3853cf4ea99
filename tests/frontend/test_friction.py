"""What tripped a new user writing nine architectures from the literature (issue 27, "what tripped the
user", items 1–8): each item is a program that once gave a wrong or unlocated message, or none."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pseudoformer.errors import CompileError
from pseudoformer.model import check, load
from tests.frontend.notation_run import run_both, write


def errors_of(call) -> list:
    with pytest.raises(CompileError) as info:
        call()
    return info.value.errors


# 1. A size whose name starts like a parameter family: W_img beside `For h ∈ [H]: W_h`.
IMAGE = """Algorithm: Y ← Patches(X | W)
  Input: X ∈ ℝ^{d × W_img}, the columns of an image.
  Output: Y ∈ ℝ^{d}
  Hyperparameters: H, W_img ∈ ℕ, the image width.
  Parameters: W consisting of:
    For h ∈ [H]:
      W_h ∈ ℝ^{d × d}
  1 return Y = W_1 X[:, W_img] + W_H X[:, 1]
"""


def test_a_size_named_like_a_parameter_family_is_the_size(tmp_path: Path) -> None:
    path = write(tmp_path, IMAGE)
    assert check(path) == ["Patches"]
    model = load(path, defines=["d=3", "W_img=4", "H=2"])
    x = np.random.default_rng(0).standard_normal((2, 4, 3)).astype(np.float32)
    w = model.weights
    want = x[:, 3] @ w["heads.0.W"].T + x[:, 0] @ w["heads.1.W"].T
    np.testing.assert_allclose(run_both(model, X=x)["Y"], want, rtol=1e-5, atol=1e-5)


# 2. A learned value, then per-example columns assigned over it: the joined value is per-example.
CLASS_COLUMN = """Algorithm: Y ← WithClass(E | W_p)
  Input: E ∈ ℝ^{d × N}, patch embeddings.
  Output: Y ∈ ℝ^{d × N + 1}
  Hyperparameters: d, N ∈ ℕ
  Parameters: W_p ∈ ℝ^{d × N + 1}, learned positions; column 1 is the class column.
  1 X ← W_p
  2 for t ∈ [N] : X[:, t + 1] ← W_p[:, t + 1] + E[:, t]
  3 return Y = X
"""


def test_per_example_columns_over_a_learned_value(tmp_path: Path) -> None:
    path = write(tmp_path, CLASS_COLUMN)
    assert check(path) == ["WithClass"]
    model = load(path, defines=["d=3", "N=4"])
    e = np.random.default_rng(1).standard_normal((2, 4, 3)).astype(np.float32)
    wp = model.weights["W_p"].T  # [N + 1, d]
    want = np.concatenate([np.broadcast_to(wp[:1], (2, 1, 3)), wp[1:] + e], axis=1)
    np.testing.assert_allclose(run_both(model, E=e)["Y"], want, rtol=1e-6, atol=1e-6)


# 3. A real passed by a name the caller does not declare: check and compile say the same, and how to fix it.
UNDECLARED_REAL = """Algorithm: Y ← Scale(X | b)
  Input: X ∈ ℝ^{d × ℓ}
  Output: Y ∈ ℝ^{d × ℓ}
  Hyperparameters: b ∈ ℝ, the base.
  1 return Y = X / b

Algorithm: Y ← Caller(X | W)
  Input: X ∈ ℝ^{d × ℓ}
  Output: Y ∈ ℝ^{d × ℓ}
  Parameters: W ∈ ℝ^{d × d}
  1 return Y = Scale(W X | b)
"""


@pytest.mark.parametrize("defines", [[], ["d=2", "b=10000.0"], ["d=2", "b=10000"]])
def test_an_undeclared_real_argument_says_how_to_declare_it(tmp_path: Path, defines: list[str]) -> None:
    path = write(tmp_path, UNDECLARED_REAL)
    for call in (lambda: check(path, defines=defines), lambda: load(path, defines=defines or ["d=2"])):
        (err,) = errors_of(call)
        assert (err.pos.line, err.pos.col) == (11, 28)
        assert "b is not declared in Caller: add `b ∈ ℝ` to its Hyperparameters" in err.message
        assert "or leave b out of the call" in err.message


def test_the_two_fixes_of_an_undeclared_real_work(tmp_path: Path) -> None:
    declared = UNDECLARED_REAL.replace("  Parameters: W ∈ ℝ^{d × d}\n",
                                       "  Parameters: W ∈ ℝ^{d × d}\n  Hyperparameters: b ∈ ℝ\n")
    left_out = UNDECLARED_REAL.replace("Scale(W X | b)", "Scale(W X)")
    x = np.random.default_rng(2).standard_normal((1, 3, 2)).astype(np.float32)
    for k, source in enumerate((declared, left_out)):
        path = write(tmp_path, source, f"fix{k}.alg")
        assert check(path) == ["Scale", "Caller"]
        model = load(path, defines=["d=2", "b=4.0"])
        np.testing.assert_allclose(model.run(X=x)["Y"], x @ model.weights["W"].T / 4.0, rtol=1e-6)
