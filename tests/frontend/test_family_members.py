"""A script computed before run time picks a member of a parameter family (docs/language.md §7):
`W_k^1`, `W_k^{H_kv}`, and grouped-query attention's `W_k^{⌈h/G⌉}` inside `For h ∈ [H]:`. The member is
the PARAM node itself, the same node wherever the same member is picked, so CSE shares its products."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.ir import Op
from pseudoformer.model import check, load
from pseudoformer.optimize import optimize

PICK = """Algorithm: Y ← picks(X | W)
  Input: X ∈ ℝ^{d × ℓ}
  Output: Y ∈ ℝ^{H d × ℓ}
  Hyperparameters: H, H_kv, d ∈ ℕ
  Parameters: W consisting of:
    For g ∈ [H_kv]: W^g_k ∈ ℝ^{d × d}
  1 For h ∈ [H]:
  2   Yʰ ← W_k^{H_kv} X + W_k^1 X
  3 Y ← [Y¹; Y²; …; Y^H]
  4 return Y
"""


def test_a_script_picks_the_member(tmp_path) -> None:
    path = tmp_path / "m.alg"
    path.write_text(PICK, encoding="utf-8")
    model = load(path, defines=["H=3", "H_kv=2", "d=4"])
    assert sorted(model.weights) == ["g.0.W_k", "g.1.W_k"]
    x = np.random.default_rng(0).standard_normal((2, 5, 4)).astype(np.float32)
    w = model.weights
    one = x @ (w["g.1.W_k"] + w["g.0.W_k"]).T
    np.testing.assert_allclose(model.run(X=x)["Y"], np.concatenate([one] * 3, -1), rtol=1e-5, atol=1e-5)
    # every head reads the same two PARAM nodes, so after CSE the two products are computed once
    graph = optimize(model.graph, 1)
    assert sum(n.op is Op.MATMUL for n in graph.nodes()) == 2
    assert check(path) == ["picks"]


GQA = """Algorithm: Y ← grouped(X | W)
  Input: X ∈ ℝ^{d × ℓ}
  Output: Y ∈ ℝ^{H d × ℓ}
  Hyperparameters: H, H_kv, d ∈ ℕ, G = H / H_kv
  Parameters: W consisting of:
    For h ∈ [H]: W^h_q ∈ ℝ^{d × d}
    For g ∈ [H_kv]: W^g_k ∈ ℝ^{d × d}
  1 For h ∈ [H]:
  2   Yʰ ← W^h_q X + W_k^{⌈h/G⌉} X
  3 Y ← [Y¹; Y²; …; Y^H]
  4 return Y
"""


@pytest.mark.parametrize("spelling", ["W_k^{⌈h/G⌉}", "W_k^{ceil(h/G)}", "W_k^{\\lceil h/G \\rceil}"])
def test_grouped_heads_share_their_key_projection(tmp_path, spelling: str) -> None:
    path = tmp_path / "gqa.alg"
    path.write_text(GQA.replace("W_k^{⌈h/G⌉}", spelling), encoding="utf-8")
    model = load(path, defines=["H=4", "H_kv=2", "d=3"])
    w = model.weights
    x = np.random.default_rng(1).standard_normal((2, 5, 3)).astype(np.float32)
    # heads 1 and 2 read member 1 of W_k, heads 3 and 4 member 2
    want = np.concatenate([x @ (w[f"heads.{h}.W_q"] + w[f"g.{h // 2}.W_k"]).T for h in range(4)], -1)
    np.testing.assert_allclose(model.run(X=x)["Y"], want, rtol=1e-5, atol=1e-5)
    graph = optimize(model.graph, 1)
    assert sum(n.op is Op.MATMUL for n in graph.nodes()) == 4 + 2  # a product per query head, per K member
    assert check(path) == ["grouped"]  # without a config G = H/H_kv is a size of its own
