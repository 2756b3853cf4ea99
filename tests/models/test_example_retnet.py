"""models/examples/retnet.alg against numpy: RetNet's parallel retention (Sun et al., 2023, eq. 5 and 8),
head h = LN((QKᵀ/√d ⊙ D_h) V) with D_h[n, m] = γ_h^{n−m} for m ≤ n and 0 after, γ_h = 1 − 2^{−5−h}, the
heads gated by swish(X W_G) before W_O."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pseudoformer.ir import Op
from pseudoformer.model import Model
from tests.models.examples_numpy import (
    assert_checks,
    causal,
    embed,
    f64,
    fused_ops,
    grid,
    layer_norm,
    load_example,
    mlp,
    on_every_backend,
    on_tvm,
    softmax,
    tokens,
)

SHAPES = [(2, 9), (1, 16), (3, 1)]


@pytest.fixture(scope="module")
def model() -> Model:
    return load_example("retnet")


def retention(x: np.ndarray, w, prefix: str, gamma: float, eps: float) -> np.ndarray:  # noqa: ANN001
    q, k, v = (x @ f64(w, f"{prefix}W_{p}").T for p in "qkv")
    n, m = grid(len(x))
    decay = np.where(causal(len(x)), gamma ** (n - m).astype(np.float64), 0.0)
    y = (q @ k.T / math.sqrt(q.shape[-1]) * decay) @ v
    return layer_norm(y, f64(w, prefix + "gamma_n"), f64(w, prefix + "beta_n"), eps)


def reference(model: Model, x: np.ndarray, decays=None) -> np.ndarray:  # noqa: ANN001
    w, hp = model.weights, model.config.hyperparameters
    decays = decays or [1 - 2.0 ** (-5 - h) for h in range(1, hp["H"] + 1)]
    out = []
    for row in x:
        X = embed(row, w, positions=False)
        for i in range(hp["L"]):
            p = f"layers.{i}."
            Xn = layer_norm(X, f64(w, p + "gamma_1"), f64(w, p + "beta_1"), hp["eps"])
            y = np.concatenate([retention(Xn, w, f"{p}W.heads.{h}.W_qkv.", g, hp["eps"])
                                for h, g in enumerate(decays)], -1)
            gate = Xn @ f64(w, p + "W.W_G").T
            X = X + (gate / (1 + np.exp(-gate)) * y) @ f64(w, p + "W.W_O").T
            Xn = layer_norm(X, f64(w, p + "gamma_2"), f64(w, p + "beta_2"), hp["eps"])
            X = X + mlp(Xn, w, p)
        X = layer_norm(X, f64(w, "gamma"), f64(w, "beta"), hp["eps"])
        out.append(softmax(X @ f64(w, "W_u").T))
    return np.stack(out)


def test_checks() -> None:
    assert_checks("retnet")


@pytest.mark.parametrize("shape", SHAPES)
def test_matches_numpy(model: Model, shape: tuple[int, int]) -> None:
    x = tokens(*shape, vocab=model.config.hyperparameters["N_V"], seed=sum(shape))
    on_every_backend(model, {"x": x}, "P", reference(model, x))


def test_matches_numpy_on_tvm(model: Model) -> None:
    x = tokens(2, 7, vocab=model.config.hyperparameters["N_V"], seed=3)
    on_tvm(model, {"x": x}, "P", reference(model, x))


def test_the_decays_matter(model: Model) -> None:
    x = tokens(1, 16, vocab=model.config.hyperparameters["N_V"], seed=5)
    assert np.abs(model.run(x=x)["P"] - reference(model, x, decays=[0.5, 0.9])).max() > 1e-3


def test_the_decay_matrices_are_built_once(model: Model) -> None:
    """γ_h^{t_x − t_z} is one real power per head, shared by the layers; there is no softmax but the vocabulary's."""
    ops = fused_ops(model)
    assert ops[Op.POW] == model.config.hyperparameters["H"] and ops[Op.SOFTMAX] == 1
