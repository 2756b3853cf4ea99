"""Heads declared as an algorithm group (`W^h_qkv : Head`) checked without a config (issue 12 item 1).

The per-head sizes are the callee's (`d_attn`, `d_mid` appear only in Head's declarations); the
caller's `W_o ∈ ℝ^{d_x × d_mid H}` meets the H stacked heads, `H·?d_mid` rows, and sizes compare as
polynomials, so either order of the product is the same size, with or without a config, and a size
nothing pins stays a size of its own when checking without one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pseudoformer.base.errors import CompileError
from pseudoformer.frontend.sizes import Size
from pseudoformer.model import check, load
from tests.frontend.notation_run import run_both, write

HEAD = """Algorithm: Ṽ ← Head(X | W_qkv, Mask)
  Input: X ∈ ℝ^{d_x × ℓ}
  Output: Ṽ ∈ ℝ^{d_mid × ℓ}
  Hyperparameters: Mask ∈ {0,1}^{ℓ × ℓ}
  Parameters: W_qkv consisting of:
    W_q, W_k ∈ ℝ^{d_attn × d_x}, W_v ∈ ℝ^{d_mid × d_x}
  1 S ← (W_k X)ᵀ (W_q X)
  2 ∀t_z, t_x : if ¬Mask[t_z, t_x] then S[t_z, t_x] ← −∞
  3 return Ṽ = W_v X · softmax(S / √d_attn)

"""

MULTI = HEAD + """Algorithm: Y ← Multi(X | 𝒲)
  Input: X ∈ ℝ^{d_x × ℓ}
  Output: Y ∈ ℝ^{d_x × ℓ}
  Hyperparameters: SIZES
  Parameters: 𝒲 consisting of:
    For h ∈ [H]:
      W^h_qkv : Head
    W_o ∈ ℝ^{d_x × PRODUCT}
  1 For h ∈ [H]:
  2   Yʰ ← Head(X | W^h_qkv, Mask[t, t'] ≡ [[t ≤ t']])
  3 Y ← [Y¹; Y²; …; Y^H]
  4 return Y = W_o Y
"""

def source(sizes: str, product: str) -> str:
    return MULTI.replace("SIZES", sizes).replace("PRODUCT", product)


PRODUCTS = ["H d_mid", "d_mid H", "H · d_mid", "d_mid · H"]
DECLARED = ["H ∈ ℕ", "H, d_mid ∈ ℕ", "H, d_mid, d_attn ∈ ℕ"]


@pytest.mark.parametrize("sizes", DECLARED)
@pytest.mark.parametrize("product", PRODUCTS)
def test_either_order_checks_without_a_config(tmp_path: Path, product: str, sizes: str) -> None:
    path = write(tmp_path, source(sizes, product))
    assert check(path) == ["Head", "Multi"]


@pytest.mark.parametrize("product", PRODUCTS)
def test_either_order_runs_with_a_config(tmp_path: Path, product: str) -> None:
    path = write(tmp_path, source("H ∈ ℕ", product))
    defines = ["H=2", "d_mid=3", "d_x=4", "d_attn=2"]
    assert check(path, defines=defines) == ["Head", "Multi"]
    model = load(path, defines=defines)
    x = np.random.default_rng(1).standard_normal((2, 5, 4)).astype(np.float32)
    w = model.weights
    causal = np.tril(np.ones((5, 5), bool))  # [t_x, t_z]: query t_x sees keys t_z ≤ t_x
    heads = []
    for h in range(2):
        p = f"heads.{h}.W_qkv."
        q, k, v = (x @ w[p + n].T for n in ("W_q", "W_k", "W_v"))
        s = np.where(causal, q @ k.transpose(0, 2, 1) / np.sqrt(2), -np.inf)
        a = np.exp(s - s.max(-1, keepdims=True))
        heads.append((a / a.sum(-1, keepdims=True)) @ v)
    want = np.concatenate(heads, -1) @ w["W_o"].T
    np.testing.assert_allclose(run_both(model, X=x)["Y"], want, rtol=1e-5, atol=1e-5)


def test_a_mismatch_is_still_reported(tmp_path: Path) -> None:
    path = write(tmp_path, source("H ∈ ℕ", "d_mid H + 1"))
    with pytest.raises(CompileError, match="differ|expected size"):
        check(path)


@pytest.mark.parametrize("text", ["H·?d_mid#6", "2·d + 1", "-1 + ell", "floor((H·d)/2)", "d/2·H", "7"])
def test_ir_dims_parse_back_to_their_size(text: str) -> None:
    """A node's dim holding an unknown is re-read when unification solves it (values.Builder.solve)."""
    size = Size.parse(text)
    assert str(size) == str(Size.parse(str(size)))
    assert Size.parse("H·?d_mid#6").subst({"?d_mid#6": Size.of("d_mid")}) == Size.of("H") * Size.of("d_mid")


SHARED = """Algorithm: y ← Lin(x | W_lin)
  Input: x ∈ ℝ^{d}
  Output: y ∈ ℝ^{d}
  Parameters: W_lin consisting of:
    A ∈ ℝ^{d × d}, c ∈ ℝ^{d}
  1 return y = A x + c

Algorithm: y ← Two(x | θ)
  Input: x ∈ ℝ^{d}
  Output: y ∈ ℝ^{d}
  Hyperparameters: d, L ∈ ℕ
  Parameters: θ consisting of:
    For l ∈ [L]:
      F^a_l, F^b_l : Lin, the two maps of layer l
    G, K : Lin
  1 for l = 1, 2, …, L do
  2   x ← Lin(Lin(x | F^a_l) | F^b_l)
  3 end
  4 return y = Lin(x | G) − Lin(x | K)
"""


def test_several_names_share_one_algorithm_group(tmp_path: Path) -> None:
    """`F^a_l, F^b_l : Lin` declares two groups of Lin's parameters, as `W_q, W_k ∈ ℝ^{…}` two matrices."""
    path = write(tmp_path, SHARED)
    assert check(path) == ["Lin", "Two"]
    model = load(path, defines=["d=3", "L=2"])
    w = model.weights
    assert sorted(w) == sorted(f"{p}.{leaf}" for p in ("layers.0.F_a", "layers.0.F_b", "layers.1.F_a",
                                                       "layers.1.F_b", "G", "K") for leaf in ("A", "c"))
    x = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)

    def lin(v: np.ndarray, p: str) -> np.ndarray:
        return v @ w[f"{p}.A"].T + w[f"{p}.c"]

    v = x
    for i in range(2):
        v = lin(lin(v, f"layers.{i}.F_a"), f"layers.{i}.F_b")
    np.testing.assert_allclose(run_both(model, x=x)["y"], lin(v, "G") - lin(v, "K"), rtol=1e-5, atol=1e-5)
