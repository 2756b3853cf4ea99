"""models/examples/t5_bias.alg against numpy: a bidirectional encoder with a learned bias per offset."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.model import Model
from tests.models.examples_numpy import (
    assert_checks,
    assert_fused,
    f64,
    grid,
    load_example,
    on_every_backend,
    on_tvm,
    t5_encoder,
    tokens,
)

SHAPES = [(2, 9), (1, 16), (3, 1), (2, 2)]  # ℓ = 16 = ℓ_max uses every weight of w


@pytest.fixture(scope="module")
def model() -> Model:
    return load_example("t5_bias")


def forward(x: np.ndarray, w, hp: dict, flip: bool = False) -> np.ndarray:  # noqa: ANN001
    """The encoder on one sequence; `flip` reads the bias of t_z − t_x instead, to show it matters."""
    def rule(layer: int):  # noqa: ANN202
        def bias(h: int, ell: int) -> dict[str, np.ndarray]:
            tx, tz = grid(ell)
            offset = (tz - tx) if flip else (tx - tz)
            table = f64(w, f"layers.{layer}.W.heads.{h - 1}.W_qkv.w")
            return {"bias": table[offset + hp["ell_max"] - 1]}  # w[t_x − t_z + ℓ_max], counting from 1
        return bias

    return t5_encoder(x, w, hp, rule)


def reference(model: Model, x: np.ndarray, flip: bool = False) -> np.ndarray:
    return np.stack([forward(row, model.weights, model.config.hyperparameters, flip) for row in x])


def test_checks() -> None:
    assert_checks("t5_bias")


@pytest.mark.parametrize("shape", SHAPES)
def test_matches_numpy(model: Model, shape: tuple[int, int]) -> None:
    x = tokens(*shape, vocab=model.config.hyperparameters["N_V"], seed=sum(shape))
    on_every_backend(model, {"x": x}, "P", reference(model, x))


def test_matches_numpy_on_tvm(model: Model) -> None:
    x = tokens(2, 10, vocab=model.config.hyperparameters["N_V"], seed=1)
    on_tvm(model, {"x": x}, "P", reference(model, x))


def test_the_direction_of_the_offset_matters(model: Model) -> None:
    x = tokens(1, 10, vocab=model.config.hyperparameters["N_V"], seed=9)
    assert np.abs(model.run(x=x)["P"] - reference(model, x, flip=True)).max() > 1e-3


def test_longer_than_ell_max_is_an_error(model: Model) -> None:
    """Offset ℓ_max has no weight: the computed index is checked when the model runs."""
    with pytest.raises(Exception, match="out of"):
        model.run(x=tokens(1, model.config.hyperparameters["ell_max"] + 1, vocab=50, seed=0))


def test_one_fused_attention_per_layer(model: Model) -> None:
    """Each head's gathered ℓ × ℓ bias becomes the attention's bias operand: no softmax or masking per
    head is left (this needs the lead's fusion of float biases, issue 12)."""
    assert_fused(model, attentions=model.config.hyperparameters["L"])
