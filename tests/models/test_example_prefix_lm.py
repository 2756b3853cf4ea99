"""models/examples/prefix_lm.alg against numpy: bidirectional over a per-example prefix, causal after it."""

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

# (batch, ℓ, the prefix length of each example): none, part, all of the sequence, mixed in one batch
CASES = [(3, 9, (0, 4, 9)), (1, 16, (7,)), (2, 1, (0, 1)), (2, 6, (2, 2))]


@pytest.fixture(scope="module")
def model() -> Model:
    return load_example("prefix_lm")


def prefix(p: float):  # noqa: ANN201
    def rule(h: int, ell: int) -> np.ndarray:
        tx, tz = grid(ell)
        return (tz <= tx) | (tz <= p)
    return rule


def reference(model: Model, x: np.ndarray, p: np.ndarray) -> np.ndarray:
    hp = model.config.hyperparameters
    return np.stack([pre_norm_decoder(row, model.weights, hp, prefix(n)) for row, n in zip(x, p, strict=True)])


def _inputs(batch: int, ell: int, lengths: tuple[int, ...]) -> dict[str, np.ndarray]:
    return {"x": tokens(batch, ell, vocab=50, seed=batch + ell), "p": np.array(lengths, np.float32)}


def test_checks() -> None:
    assert_checks("prefix_lm")


@pytest.mark.parametrize("case", CASES)
def test_matches_numpy(model: Model, case: tuple) -> None:
    feed = _inputs(*case)
    on_every_backend(model, feed, "P", reference(model, feed["x"], feed["p"]))


def test_matches_numpy_on_tvm(model: Model) -> None:
    feed = _inputs(*CASES[0])
    on_tvm(model, feed, "P", reference(model, feed["x"], feed["p"]))


def test_the_prefix_changes_the_result(model: Model) -> None:
    """Inside the prefix a token sees later ones; after it, nothing changes with the prefix."""
    x = tokens(1, 10, vocab=50, seed=7)
    causal = model.run(x=x, p=np.array([0.0], np.float32))["P"]
    wide = model.run(x=x, p=np.array([5.0], np.float32))["P"]
    assert np.abs(causal[:, :4] - wide[:, :4]).max() > 1e-3
    np.testing.assert_allclose(model.run(x=x, p=np.array([1.0], np.float32))["P"], causal, atol=1e-6)


def test_one_fused_attention_per_layer(model: Model) -> None:
    """The per-example mask [batch, ℓ, ℓ] is the attention's mask operand (the lead's fusion of issue 12)."""
    assert_fused(model, attentions=model.config.hyperparameters["L"])
