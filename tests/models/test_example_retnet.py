"""models/examples/retnet.alg against numpy: RetNet's parallel retention (Sun et al., 2023, eq. 5 and 8),
head h = LN((QKᵀ/√d ⊙ D_h) V) with D_h[n, m] = γ_h^{n−m} for m ≤ n and 0 after, γ_h = 1 − 2^{−5−h}, the
heads gated by swish(X W_G) before W_O."""

from __future__ import annotations

import math

import numpy as np

from pseudoformer.ir import Op
from pseudoformer.model import Model
from tests.models.examples_numpy import (
    causal,
    f64,
    fused_ops,
    grid,
    layer_norm,
    pre_norm_lm,
    token_lm_tests,
    tokens,
)


def retention(x: np.ndarray, w, prefix: str, gamma: float, eps: float) -> np.ndarray:  # noqa: ANN001
    q, k, v = (x @ f64(w, f"{prefix}W_{p}").T for p in "qkv")
    n, m = grid(len(x))
    decay = np.where(causal(len(x)), gamma ** (n - m).astype(np.float64), 0.0)
    y = (q @ k.T / math.sqrt(q.shape[-1]) * decay) @ v
    return layer_norm(y, f64(w, prefix + "gamma_n"), f64(w, prefix + "beta_n"), eps)


def reference(model: Model, x: np.ndarray, decays=None) -> np.ndarray:  # noqa: ANN001
    w, hp = model.weights, model.config.hyperparameters
    decays = decays or [1 - 2.0 ** (-5 - h) for h in range(1, hp["H"] + 1)]

    def attention(Xn: np.ndarray, p: str) -> np.ndarray:
        y = np.concatenate([retention(Xn, w, f"{p}W.heads.{h}.W_qkv.", g, hp["eps"])
                            for h, g in enumerate(decays)], -1)
        gate = Xn @ f64(w, p + "W.W_G").T
        return (gate / (1 + np.exp(-gate)) * y) @ f64(w, p + "W.W_O").T

    return pre_norm_lm(model, x, attention, positions=False)


model, test_checks, test_matches_numpy, test_matches_numpy_on_tvm = token_lm_tests(
    "retnet", reference, tvm_shape=(2, 7))


def test_the_decays_matter(model: Model) -> None:
    x = tokens(1, 16, vocab=model.config.hyperparameters["N_V"], seed=5)
    assert np.abs(model.run(x=x)["P"] - reference(model, x, decays=[0.5, 0.9])).max() > 1e-3


def test_the_decay_matrices_are_built_once(model: Model) -> None:
    """γ_h^{t_x − t_z} is one real power per head, shared by the layers; there is no softmax but the vocabulary's."""
    ops = fused_ops(model)
    assert ops[Op.POW] == model.config.hyperparameters["H"] and ops[Op.SOFTMAX] == 1
