"""models/examples/alibi.alg against numpy: no position embedding, head h biased by 2^{−8h/H} (t_z − t_x)."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.model import Model
from tests.models.examples_numpy import (
    assert_checks,
    assert_fused,
    causal,
    grid,
    load_example,
    on_every_backend,
    on_tvm,
    pre_norm_decoder,
    tokens,
)

SHAPES = [(2, 9), (1, 20), (3, 1), (1, 5)]  # ALiBi has no ℓ_max: 20 is past the other examples' 16


@pytest.fixture(scope="module")
def model() -> Model:
    return load_example("alibi")


def alibi(heads: int, slope=lambda h, H: 2.0 ** (-8 * h / H)):  # noqa: ANN001, ANN201
    def rule(h: int, ell: int) -> dict[str, np.ndarray]:
        tx, tz = grid(ell)
        return {"mask": causal(ell), "bias": slope(h, heads) * (tz - tx)}
    return rule


def reference(model: Model, x: np.ndarray, **slope) -> np.ndarray:  # noqa: ANN003
    hp = model.config.hyperparameters
    return np.stack([pre_norm_decoder(row, model.weights, hp, alibi(hp["H"], **slope), positions=False,
                                      head_path="heads.{h}.W_qkv.") for row in x])


def test_checks() -> None:
    assert_checks("alibi")


@pytest.mark.parametrize("shape", SHAPES)
def test_matches_numpy(model: Model, shape: tuple[int, int]) -> None:
    x = tokens(*shape, vocab=model.config.hyperparameters["N_V"], seed=sum(shape))
    on_every_backend(model, {"x": x}, "P", reference(model, x))


def test_matches_numpy_on_tvm(model: Model) -> None:
    x = tokens(2, 12, vocab=model.config.hyperparameters["N_V"], seed=2)
    on_tvm(model, {"x": x}, "P", reference(model, x))


def test_the_slopes_change_the_result(model: Model) -> None:
    """Without the bias, or with the heads' slopes swapped, the model is far from the reference."""
    x = tokens(1, 12, vocab=model.config.hyperparameters["N_V"], seed=8)
    got = model.run(x=x)["P"]
    for slope in (lambda h, H: 0.0, lambda h, H: 2.0 ** (-8 * (H + 1 - h) / H)):
        assert np.abs(got - reference(model, x, slope=slope)).max() > 1e-3


def test_one_fused_attention_per_layer(model: Model) -> None:
    """The biases of the heads, one ℓ × ℓ matrix each, are the attention's bias operand: no softmax or
    masking per head is left (this needs the lead's fusion of float biases, issue 12)."""
    assert_fused(model, attentions=model.config.hyperparameters["L"])
