"""models/examples/vit.alg against numpy: Dosovitskiy et al.'s ViT (eq. 1–4), z_0 = [x_class; x_p E] + E_pos,
pre-norm encoder layers, y = LN(z_L^0), on flattened patches."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.model import Model
from tests.models.examples_numpy import (
    assert_checks,
    assert_fused,
    f64,
    layer_norm,
    load_example,
    mha,
    on_every_backend,
    on_tvm,
    pre_norm_layers,
    softmax,
)


@pytest.fixture(scope="module")
def model() -> Model:
    return load_example("vit")


def patches(batch: int, seed: int, hp) -> np.ndarray:  # noqa: ANN001
    return np.random.default_rng(seed).standard_normal((batch, hp["N"], hp["d_p"])).astype(np.float32)


def reference(model: Model, e: np.ndarray, cls: bool = True) -> np.ndarray:
    w, hp = model.weights, model.config.hyperparameters
    out = []
    for image in e.astype(np.float64):
        first = f64(w, "x_cls")[None] if cls else np.zeros((1, hp["d_e"]))
        X = np.concatenate([first, image @ f64(w, "W_E").T + f64(w, "b_E")]) + f64(w, "W_pos").T
        X = pre_norm_layers(X, w, hp, lambda Xn, p: mha(Xn, Xn, w, p + "W.", hp["H"]))
        y = layer_norm(X[0], f64(w, "gamma"), f64(w, "beta"), hp["eps"])
        out.append(softmax(y @ f64(w, "W_u").T + f64(w, "b_u")))
    return np.stack(out)


def test_checks() -> None:
    assert_checks("vit")


@pytest.mark.parametrize("batch", [1, 3])
def test_matches_numpy(model: Model, batch: int) -> None:
    e = patches(batch, batch, model.config.hyperparameters)
    on_every_backend(model, {"E_p": e}, "p", reference(model, e))


def test_matches_numpy_on_tvm(model: Model) -> None:
    e = patches(2, 7, model.config.hyperparameters)
    on_tvm(model, {"E_p": e}, "p", reference(model, e))


def test_the_class_column_is_learned(model: Model) -> None:
    e = patches(2, 9, model.config.hyperparameters)
    assert np.abs(model.run(E_p=e)["p"] - reference(model, e, cls=False)).max() > 1e-3


def test_one_fused_attention_per_layer(model: Model) -> None:
    assert_fused(model, attentions=model.config.hyperparameters["L"])
