"""models/examples/sliding_window.alg against numpy: a pre-norm decoder whose heads see the last w tokens."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.model import Model
from tests.models.examples_numpy import (
    assert_checks,
    assert_fused,
    grid,
    load_example,
    on_every_backend,
    on_tvm,
    pre_norm_decoder,
    tokens,
)

SHAPES = [(2, 9), (1, 16), (3, 1), (1, 5)]  # (batch, ℓ): shorter and longer than the window


@pytest.fixture(scope="module")
def model() -> Model:
    return load_example("sliding_window")


def window(w: int):  # noqa: ANN201
    def rule(h: int, ell: int) -> np.ndarray:
        tx, tz = grid(ell)
        return (tz <= tx) & (tx - tz < w)
    return rule


def reference(model: Model, x: np.ndarray, w: int | None = None) -> np.ndarray:
    hp = model.config.hyperparameters
    rule = window(hp["w"] if w is None else w)
    return np.stack([pre_norm_decoder(row, model.weights, hp, rule) for row in x])


def test_checks() -> None:
    assert_checks("sliding_window")


@pytest.mark.parametrize("shape", SHAPES)
def test_matches_numpy(model: Model, shape: tuple[int, int]) -> None:
    x = tokens(*shape, vocab=model.config.hyperparameters["N_V"], seed=sum(shape))
    on_every_backend(model, {"x": x}, "P", reference(model, x))


def test_matches_numpy_on_tvm(model: Model) -> None:
    x = tokens(2, 11, vocab=model.config.hyperparameters["N_V"], seed=3)
    on_tvm(model, {"x": x}, "P", reference(model, x))


def test_the_window_changes_the_result(model: Model) -> None:
    """The comparison can fail: a window one wider, or plain causal attention, is far from the model."""
    x = tokens(1, 12, vocab=model.config.hyperparameters["N_V"], seed=5)
    got = model.run(x=x)["P"]
    for w in (5, 12):
        assert np.abs(got - reference(model, x, w)).max() > 1e-3


def test_one_fused_attention_per_layer(model: Model) -> None:
    assert_fused(model, attentions=model.config.hyperparameters["L"])
