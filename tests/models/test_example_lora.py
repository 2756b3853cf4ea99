"""models/examples/lora.alg against numpy: query and value projections W + (α/r) B A, rank r."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.model import Model
from tests.models.examples_numpy import (
    assert_checks,
    assert_fused,
    causal,
    load_example,
    on_every_backend,
    on_tvm,
    pre_norm_decoder,
    tokens,
)

SHAPES = [(2, 9), (1, 16), (3, 1)]


@pytest.fixture(scope="module")
def model() -> Model:
    return load_example("lora")


def adapted(w: dict[str, np.ndarray], scale: float) -> dict[str, np.ndarray]:
    """The weights with W_q and W_v of every head replaced by W + scale · B A."""
    out = {k: np.asarray(v, np.float64) for k, v in w.items()}
    for name in w:
        for p in ("q", "v"):
            if name.endswith(f".W_qkv.W_{p}"):
                base = name[: -len(f"W_{p}")]
                out[name] = out[name] + scale * out[f"{base}B_{p}"] @ out[f"{base}A_{p}"]
    return out


def reference(model: Model, x: np.ndarray, scale: float | None = None) -> np.ndarray:
    hp = model.config.hyperparameters
    w = adapted(model.weights, hp["alpha"] / hp["r"] if scale is None else scale)
    return np.stack([pre_norm_decoder(row, w, hp, lambda h, ell: causal(ell), head_path="heads.{h}.W_qkv.")
                     for row in x])


def test_checks() -> None:
    assert_checks("lora")


@pytest.mark.parametrize("shape", SHAPES)
def test_matches_numpy(model: Model, shape: tuple[int, int]) -> None:
    x = tokens(*shape, vocab=model.config.hyperparameters["N_V"], seed=sum(shape))
    on_every_backend(model, {"x": x}, "P", reference(model, x))


def test_matches_numpy_on_tvm(model: Model) -> None:
    x = tokens(2, 10, vocab=model.config.hyperparameters["N_V"], seed=3)
    on_tvm(model, {"x": x}, "P", reference(model, x))


def test_the_update_and_its_scale_matter(model: Model) -> None:
    """Unadapted (scale 0), or scaled by α instead of α/r, the model is far from the reference."""
    x = tokens(1, 10, vocab=model.config.hyperparameters["N_V"], seed=4)
    got = model.run(x=x)["P"]
    for scale in (0.0, model.config.hyperparameters["alpha"]):
        assert np.abs(got - reference(model, x, scale)).max() > 1e-3


def test_one_fused_attention_per_layer(model: Model) -> None:
    assert_fused(model, attentions=model.config.hyperparameters["L"])
