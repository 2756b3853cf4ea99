"""A derived size declared by a called algorithm (GQAttention's G = H / H_kv) has its value inside the callee,
in types and in the static scripts that pick family members (W_k^{⌈h/G⌉}), not only in an entry."""

from __future__ import annotations

import numpy as np

from pseudoformer.model import check, load

GROUPED = """Algorithm: Y ← grouped(X | W)
  Input: X ∈ ℝ^{d × ℓ}
  Output: Y ∈ ℝ^{H d × ℓ}
  Hyperparameters: H, H_kv, d ∈ ℕ
  Hyperparameters: G = H / H_kv
  Parameters: W consisting of:
    For g ∈ [H_kv]: W^g_k ∈ ℝ^{d × d}
  1 For h ∈ [H]:
  2   Yʰ ← W_k^{⌈h/G⌉} X
  3 Y ← [Y¹; Y²; …; Y^H]
  4 return Y

Algorithm: Z ← outer(X | θ)
  Input: X ∈ ℝ^{d × ℓ}
  Output: Z ∈ ℝ^{H d × ℓ}
  Hyperparameters: H, H_kv, d ∈ ℕ
  Parameters: θ consisting of:
    V : grouped
  1 return Z = grouped(X | V)
"""


def test_a_callees_derived_size_picks_the_member(tmp_path) -> None:
    path = tmp_path / "m.alg"
    path.write_text(GROUPED, encoding="utf-8")
    model = load(path, entry="outer", defines=["H=4", "H_kv=2", "d=3"])
    w = model.weights
    assert sorted(w) == ["V.g.0.W_k", "V.g.1.W_k"]
    x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    first, second = x @ w["V.g.0.W_k"].T, x @ w["V.g.1.W_k"].T  # heads 1, 2 share member 1; heads 3, 4 member 2
    want = np.concatenate([first, first, second, second], -1)
    np.testing.assert_allclose(model.run(X=x)["Z"], want, rtol=1e-5, atol=1e-5)


# LoRA's scale α / r: the callee declares its rank r, the entry does not, and only an expression reads it.
SCALED = """Algorithm: y ← adapted(x | W_ad)
  Input: x ∈ ℝ^{d}
  Output: y ∈ ℝ^{d}
  Hyperparameters: r ∈ ℕ, α ∈ ℝ
  Parameters: W_ad consisting of:
    W ∈ ℝ^{d × d}, A ∈ ℝ^{r × d}, B ∈ ℝ^{d × r}
  1 return y = (W + α / r · B A) x

Algorithm: z ← outer(x | θ)
  Input: x ∈ ℝ^{d}
  Output: z ∈ ℝ^{d}
  Hyperparameters: d ∈ ℕ
  Parameters: θ consisting of:
    F : adapted
  1 return z = adapted(x | F)
"""


def test_a_callee_size_read_in_an_expression_checks_without_a_config(tmp_path) -> None:
    """Without a config r is the size a config would give by its name, not an unknown name."""
    path = tmp_path / "scaled.alg"
    path.write_text(SCALED, encoding="utf-8")
    assert check(path) == ["adapted", "outer"]
    model = load(path, defines=["d=3", "r=2", "alpha=4.0"])
    w = model.weights
    x = np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)
    want = x @ (w["F.W"] + 2.0 * w["F.B"] @ w["F.A"]).T
    np.testing.assert_allclose(model.run(x=x)["z"], want, rtol=1e-5, atol=1e-6)
