"""What tripped a new user writing nine architectures from the literature (issue 27, "what tripped the
user", items 1–8): each item is a program that once gave a wrong or unlocated message, or none."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pseudoformer.base.errors import CompileError
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


# 5. An Iverson bracket that ends in an index: `]]]` is the index's `]` and the bracket's `]]`.
def test_an_iverson_bracket_may_end_in_an_index(tmp_path: Path) -> None:
    path = write(tmp_path, """Algorithm: R ← Rank(G)
  Input: G ∈ ℝ^{E × ℓ}
  Output: R ∈ ℝ^{E × ℓ}
  1 for j ∈ [E], t ∈ [ℓ] : R[j, t] ← Σ_k [[G[k, t] > G[j, t]]] + ⟦G[j, t] > G[1, t]⟧
  2 return R
""")
    g = np.random.default_rng(3).standard_normal((2, 5, 4)).astype(np.float32)  # [batch, ℓ, E]
    want = (g[:, :, None, :] > g[:, :, :, None]).sum(-1) + (g > g[:, :, :1])
    np.testing.assert_allclose(run_both(load(path, defines=["E=4"]), G=g)["R"], want)


# 6. An algorithm named with a Greek letter is called by that letter, in Unicode and in LaTeX.
@pytest.mark.parametrize("call", ["φ(X)", "\\varphi(X)", "\\phi(X)"])
def test_an_algorithm_named_phi_can_be_called(tmp_path: Path, call: str) -> None:
    path = write(tmp_path, f"""Algorithm: y ← φ(x)
  Input: x ∈ ℝ^{{d}}
  Output: y ∈ ℝ^{{d}}
  1 return y = ReLU(x) + 1

Algorithm: Y ← Features(X)
  Input: X ∈ ℝ^{{d × ℓ}}
  Output: Y ∈ ℝ^{{d × ℓ}}
  1 return Y = {call} ⊙ X
""")
    assert check(path) == ["φ", "Features"]
    x = np.random.default_rng(4).standard_normal((2, 3, 2)).astype(np.float32)
    np.testing.assert_allclose(run_both(load(path, defines=["d=2"]), X=x)["Y"], (np.maximum(x, 0) + 1) * x, rtol=1e-6)


# 7. Three errors that now say how to write it instead.
def test_an_unknown_range_says_to_give_it_in_the_map(tmp_path: Path) -> None:
    path = write(tmp_path, """Algorithm: S ← Offsets(X)
  Input: X ∈ ℝ^{d × ℓ}
  Output: S ∈ ℝ^{ℓ × ℓ}
  1 ∀t_z, t_x : S[t_z, t_x] ← ⌊(t_x − t_z) / 2⌋
  2 return S
""")
    (err,) = errors_of(lambda: check(path))
    assert (err.pos.line, err.pos.col) == (4, 33)
    assert "say it in the map, `for t_z ∈ [ℓ], t_x ∈ [ℓ] :`" in err.message
    fixed = write(tmp_path, path.read_text(encoding="utf-8").replace("∀t_z, t_x :", "for t_z ∈ [ℓ], t_x ∈ [ℓ] :"),
                  "fixed.alg")
    assert check(fixed) == ["Offsets"]


def test_a_sum_bound_read_from_data_says_to_use_an_iverson_bracket(tmp_path: Path) -> None:
    path = write(tmp_path, """Algorithm: y ← Upto(x, b)
  Input: x ∈ ℝ^{ℓ}, b ∈ ℝ
  Output: y ∈ ℝ
  1 return y = Σ_{u=1}^{b} x[u]
""")
    (err,) = errors_of(lambda: check(path))
    assert (err.pos.line, err.pos.col) == (4, 25)
    assert "for a bound read from data, sum an Iverson bracket instead: Σ_u [[u ≤ b]] x_u" in err.message


def test_a_target_position_of_two_map_variables_says_what_to_write(tmp_path: Path) -> None:
    path = write(tmp_path, """Algorithm: Y ← Put(X, p)
  Input: X ∈ ℝ^{d × ℓ}, p ∈ [ℓ]*
  Output: Y ∈ ℝ^{d × ℓ}
  1 Y ← X
  2 for s ∈ [2], t ∈ [2] : Y[:, p[s] + t] ← X[:, t]
  3 return Y
""")
    (err,) = errors_of(lambda: load(path, defines=["d=2"]))
    assert (err.pos.line, err.pos.col) == (5, 33)
    assert "this one depends on s and t: write one assignment per variable" in err.message


def test_one_computed_target_position_needs_no_map(tmp_path: Path) -> None:
    """`Y[:, p] ← X[:, 1]` once said "a computed target position depends on exactly one map variable"."""
    path = write(tmp_path, """Algorithm: Y ← Put(X, p)
  Input: X ∈ ℝ^{d × ℓ}, p ∈ [ℓ]
  Output: Y ∈ ℝ^{d × ℓ}
  1 Y ← X
  2 Y[:, p] ← X[:, 1]
  3 return Y
""")
    x = np.random.default_rng(5).standard_normal((2, 3, 2)).astype(np.float32)
    p = np.array([2, 1])
    want = x.copy()
    want[np.arange(2), p] = x[:, 0]
    np.testing.assert_allclose(run_both(load(path, defines=["d=2"]), X=x, p=p)["Y"], want)


# 8. The reference documents what works: every builtin, three-index tensors, explicit family members, the
# seeded initialisation and reading it back.
LANGUAGE = Path(__file__).resolve().parents[2] / "docs" / "language.md"


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n#", start + len(heading))
    return text[start:end]


def test_the_reference_lists_every_builtin_function() -> None:
    from pseudoformer.frontend.expressions.builtin_calls import BUILTINS

    functions = _section(LANGUAGE.read_text(encoding="utf-8"), "### 5.3 Functions")
    assert [b for b in sorted(BUILTINS) if f"`{b}" not in functions and f"/`{b}`" not in functions] == []


def test_the_reference_documents_what_works(tmp_path: Path) -> None:
    text = LANGUAGE.read_text(encoding="utf-8")
    limits = _section(text, "Limitations\n")
    assert "no explicit member" not in limits and "`W^1_2`" in limits  # section 7 says they work; so does 14
    assert "ℝ^{E × d × d}" in _section(text, "### 3.1 Types")
    weights = text[text.index("**Weights.**"):text.index("## 10. Configs")]
    assert "--seed N" in weights and 'm.weights["layers.0.W.W_o"]' in weights
    # what the section shows: the seeded init, by parameter name, the same for the same seed
    alibi = Path(__file__).resolve().parents[2] / "models" / "examples" / "alibi.alg"
    a, b, c = (load(alibi, seed=s) for s in (3, 3, 4))
    assert np.array_equal(a.weights["layers.0.W.W_o"], b.weights["layers.0.W.W_o"])
    assert not np.array_equal(a.weights["layers.0.W.W_o"], c.weights["layers.0.W.W_o"])
    family = write(tmp_path, """Algorithm: Y ← F(X | θ)
  Input: X ∈ ℝ^{d × ℓ}
  Output: Y ∈ ℝ^{d × ℓ}
  Parameters: θ consisting of:
    For l ∈ [L]:
      W^l_2 ∈ ℝ^{d × d}
  1 return Y = W^1_2 X
""")
    model = load(family, defines=["d=2", "L=3"])
    x = np.ones((1, 1, 2), dtype=np.float32)
    np.testing.assert_allclose(model.run(X=x)["Y"], x @ model.weights["layers.0.W_2"].T, rtol=1e-6)
