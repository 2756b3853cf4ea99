"""Expert products (a mixture of experts): Σ_j W[r_t, i, j] x[j, t] over per-token gathered matrices becomes one
EXPERT_MATMUL at -O2, summed over W's last axis or over its middle one, and computes what the gathers as written
compute, on the interpreter and ONNX Runtime (whose lowering groups the tokens by expert); a product that is not
one with a matrix is refused with its reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pseudoformer.ir import Op
from pseudoformer.model import load
from pseudoformer.optimize import optimize, refusals
from tests.frontend.notation_run import run_both, write

ROUTED = """Algorithm: Y ← Routed(X | W, V)
  Input: X ∈ ℝ^{d × ℓ}
  Output: Y ∈ ℝ^{n × ℓ}
  Hyperparameters: E, k ∈ ℕ
  Parameters: W ∈ ℝ^{E × n × d}, V ∈ ℝ^{E × n × n}
  1 for t ∈ [ℓ] : R[:, t] ← argtop-k_{j ∈ [E]} X[j, t]
  2 for c ∈ [k], i ∈ [n], t ∈ [ℓ] : H[c, i, t] ← Σ_j W[R[c, t], i, j] X[j, t]
  3 for i ∈ [n], t ∈ [ℓ] : Y[i, t] ← Σ_{c=1}^{k} SECOND
  4 return Y
"""


def _want(x: np.ndarray, w: np.ndarray, v: np.ndarray, over_rows: bool) -> np.ndarray:
    """From the formula, on x [batch, ℓ, d]; the routes are the k = 2 largest of x's first E features."""
    r = np.argsort(-x[..., :4], axis=-1, kind="stable")[..., :2]  # [batch, ℓ, k]
    h = np.einsum("btcij,btj->btci", w[r], x)
    vr = v[r]  # [batch, ℓ, k, n, n]
    second = np.einsum("btcji,btcj->btci", vr, h) if over_rows else np.einsum("btcij,btcj->btci", vr, h)
    return second.sum(2)


@pytest.mark.parametrize("second,over_rows", [("Σ_j V[R[c, t], i, j] H[c, j, t]", False),
                                              ("Σ_j V[R[c, t], j, i] H[c, j, t]", True)], ids=["over-j", "over-i"])
def test_expert_products_fuse_and_compute_the_gathers(tmp_path: Path, second: str, over_rows: bool) -> None:
    model = load(write(tmp_path, ROUTED.replace("SECOND", second)), defines=["d=6", "n=6", "E=4", "k=2"])
    graph = optimize(model.graph, 2)
    assert sum(n.op is Op.EXPERT_MATMUL for n in graph.nodes()) == 2
    assert not [n for n in graph.nodes() if n.op is Op.GATHER]  # no per-token copy of a matrix is left
    x = np.random.default_rng(5).standard_normal((2, 7, 6)).astype(np.float32)
    got = run_both(model, X=x)["Y"]
    np.testing.assert_allclose(got, _want(x, model.weights["W"], model.weights["V"], over_rows), rtol=1e-5, atol=1e-5)


def test_a_product_that_is_not_with_a_matrix_is_refused(tmp_path: Path) -> None:
    """Σ_j W[r, i, j] (X[j, t] + X[i, t]): the other factor varies with i, so it is no product of W[r] and a vector."""
    source = ROUTED.replace("i, j] X[j, t]", "i, j] (X[j, t] + X[i, t])").replace("SECOND", "H[c, i, t]")
    model = load(write(tmp_path, source), defines=["d=6", "n=6", "E=4", "k=2"])
    notes = [r for r in refusals(model.graph, 2) if "expert_matmul" in r.message]
    assert len(notes) == 1 and "varies along the experts' other axis" in notes[0].message, notes
    assert notes[0].pos.line == 7  # the user's line
    x = np.random.default_rng(6).standard_normal((1, 3, 6)).astype(np.float32)
    run_both(model, X=x)


GATED = ROUTED.replace("SECOND", "H[c, i, t]").replace(
    "H[c, i, t] ← Σ_j W[R[c, t], i, j] X[j, t]",
    "H[c, i, t] ← SiLU(Σ_j W[R[c, t], i, j] X[j, t]) (Σ_j U[R[c, t], i, j] X[j, t])").replace(
    "V ∈ ℝ^{E × n × n}", "V ∈ ℝ^{E × n × n}, U ∈ ℝ^{E × n × d}").replace("(X | W, V)", "(X | W, V, U)")


def test_swiglu_experts_pack_their_gate_and_up_products(tmp_path: Path) -> None:
    """SiLU(Σ_j W[r, i, j] x[j]) ⊙ Σ_j U[r, i, j] x[j] (Mixtral's experts): one expert_matmul of [W U] and one
    swiglu, as one SwiGLU MLP packs its two projections."""
    model = load(write(tmp_path, GATED), defines=["d=6", "n=5", "E=4", "k=2"])
    graph = optimize(model.graph, 2)
    products = [n for n in graph.nodes() if n.op is Op.EXPERT_MATMUL]
    assert len(products) == 1 and products[0].src[0].op is Op.CONCAT
    assert sum(n.op is Op.SWIGLU for n in graph.nodes()) == 1
    x = np.random.default_rng(8).standard_normal((2, 7, 6)).astype(np.float32)
    w, u = model.weights["W"], model.weights["U"]
    r = np.argsort(-x[..., :4], axis=-1, kind="stable")[..., :2]
    g, h = np.einsum("btcij,btj->btci", w[r], x), np.einsum("btcij,btj->btci", u[r], x)
    want = (g / (1 + np.exp(-g)) * h).sum(2)
    np.testing.assert_allclose(run_both(model, X=x)["Y"], want, rtol=1e-5, atol=1e-5)
