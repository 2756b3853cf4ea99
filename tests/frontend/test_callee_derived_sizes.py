"""A derived size declared by a called algorithm (GQAttention's G = H / H_kv) has its value inside the callee,
in types and in the static scripts that pick family members (W_k^{⌈h/G⌉}), not only in an entry."""

from __future__ import annotations

import numpy as np

from pseudoformer.model import load

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
