"""models/examples/classifier.alg against numpy: Algorithm 9's encoder, mean-pooled into a class distribution."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.model import Model
from tests.models.examples_numpy import (
    assert_checks,
    assert_fused,
    embed,
    f64,
    gelu,
    layer_norm,
    load_example,
    mha,
    mlp,
    on_every_backend,
    on_tvm,
    softmax,
    tokens,
)

SHAPES = [(2, 9), (1, 16), (3, 1), (4, 3)]


@pytest.fixture(scope="module")
def model() -> Model:
    return load_example("classifier")


def forward(x: np.ndarray, w, hp: dict, pool=lambda X: X.mean(0)) -> np.ndarray:  # noqa: ANN001
    """Algorithm 9 (post-norm, Algorithm 6 without ε, exact GELU) up to its line 11, pooled, classified."""
    X = embed(x, w)
    for i in range(hp["L"]):
        p = f"layers.{i}."
        X = layer_norm(X + mha(X, X, w, p + "W.", hp["H"]), f64(w, p + "gamma_1"), f64(w, p + "beta_1"), 0.0)
        X = layer_norm(X + mlp(X, w, p), f64(w, p + "gamma_2"), f64(w, p + "beta_2"), 0.0)
    X = gelu(X @ f64(w, "W_f").T + f64(w, "b_f"))
    X = layer_norm(X, f64(w, "gamma"), f64(w, "beta"), 0.0)
    return softmax(pool(X) @ f64(w, "W_c").T + f64(w, "b_c"))


def reference(model: Model, x: np.ndarray, **pool) -> np.ndarray:  # noqa: ANN003
    return np.stack([forward(row, model.weights, model.config.hyperparameters, **pool) for row in x])


def test_checks() -> None:
    assert_checks("classifier")


@pytest.mark.parametrize("shape", SHAPES)
def test_matches_numpy(model: Model, shape: tuple[int, int]) -> None:
    x = tokens(*shape, vocab=model.config.hyperparameters["N_V"], seed=sum(shape))
    on_every_backend(model, {"x": x}, "p", reference(model, x))


def test_matches_numpy_on_tvm(model: Model) -> None:
    x = tokens(3, 7, vocab=model.config.hyperparameters["N_V"], seed=2)
    on_tvm(model, {"x": x}, "p", reference(model, x))


def test_the_pooling_matters(model: Model) -> None:
    """First-token pooling, BERT's, gives other probabilities than the mean the example takes."""
    x = tokens(2, 8, vocab=model.config.hyperparameters["N_V"], seed=3)
    got = model.run(x=x)["p"]
    assert got.shape == (2, model.config.hyperparameters["N_C"])
    assert np.abs(got - reference(model, x, pool=lambda X: X[0])).max() > 1e-3


def test_one_fused_attention_per_layer(model: Model) -> None:
    assert_fused(model, attentions=model.config.hyperparameters["L"])
