"""models/examples/sparse_strided.alg against numpy: Child et al.'s local and strided attention in turn."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.model import Model
from tests.models.examples_numpy import (
    assert_checks,
    assert_fused,
    embed,
    f64,
    grid,
    layer_norm,
    load_example,
    mha,
    mlp,
    on_every_backend,
    on_tvm,
    softmax,
    tokens,
)

SHAPES = [(2, 9), (1, 16), (3, 1), (2, 4)]


@pytest.fixture(scope="module")
def model() -> Model:
    return load_example("sparse_strided")


def local(s: int):  # noqa: ANN201
    def rule(h: int, ell: int) -> np.ndarray:
        tx, tz = grid(ell)
        return (tz <= tx) & (tx - tz < s)
    return rule


def strided(s: int):  # noqa: ANN201
    def rule(h: int, ell: int) -> np.ndarray:
        tx, tz = grid(ell)
        return (tz <= tx) & ((tx - tz) % s == 0)
    return rule


def forward(x: np.ndarray, w, hp: dict, s: int) -> np.ndarray:  # noqa: ANN001
    """Pre-norm layers of a local block, a strided block and the MLP; probabilities [ℓ, N_V]."""
    X = embed(x, w)
    eps = hp["eps"]
    for i in range(hp["L"]):
        p = f"layers.{i}."
        for n, name, rule in ((1, "W_loc.", local(s)), (2, "W_str.", strided(s))):
            Xn = layer_norm(X, f64(w, f"{p}gamma_{n}"), f64(w, f"{p}beta_{n}"), eps)
            X = X + mha(Xn, Xn, w, p + name, hp["H"], rule)
        X = X + mlp(layer_norm(X, f64(w, p + "gamma_3"), f64(w, p + "beta_3"), eps), w, p)
    X = layer_norm(X, f64(w, "gamma"), f64(w, "beta"), eps)
    return softmax(X @ f64(w, "W_u").T)


def reference(model: Model, x: np.ndarray, s: int | None = None) -> np.ndarray:
    hp = model.config.hyperparameters
    return np.stack([forward(row, model.weights, hp, hp["s"] if s is None else s) for row in x])


def test_checks() -> None:
    assert_checks("sparse_strided")


@pytest.mark.parametrize("shape", SHAPES)
def test_matches_numpy(model: Model, shape: tuple[int, int]) -> None:
    x = tokens(*shape, vocab=model.config.hyperparameters["N_V"], seed=sum(shape))
    on_every_backend(model, {"x": x}, "P", reference(model, x))


def test_matches_numpy_on_tvm(model: Model) -> None:
    x = tokens(2, 13, vocab=model.config.hyperparameters["N_V"], seed=4)
    on_tvm(model, {"x": x}, "P", reference(model, x))


def test_the_stride_changes_the_result(model: Model) -> None:
    x = tokens(1, 14, vocab=model.config.hyperparameters["N_V"], seed=6)
    got = model.run(x=x)["P"]
    for s in (2, 4):
        assert np.abs(got - reference(model, x, s)).max() > 1e-3


def test_two_fused_attentions_per_layer(model: Model) -> None:
    """The local and the strided block each fuse their heads; the strided mask is one `mod` over ℓ × ℓ."""
    assert_fused(model, attentions=2 * model.config.hyperparameters["L"])
