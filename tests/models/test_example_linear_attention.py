"""models/examples/linear_attention.alg against numpy: Katharopoulos et al.'s causal linear attention,
V'_t = Σ_{u ≤ t} (φ(q_t)·φ(k_u)) v_u / Σ_{u ≤ t} φ(q_t)·φ(k_u) with φ = elu + 1, written here as the
quadratic sum over the positions u ≤ t; the model computes it with two running sums."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.ir import Op
from pseudoformer.model import Model
from tests.models.examples_numpy import (
    assert_checks,
    embed,
    f64,
    fused_ops,
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
    return load_example("linear_attention")


def phi(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))) + 1.0


def linear_head(x: np.ndarray, w, prefix: str) -> np.ndarray:  # noqa: ANN001
    q = phi(x @ f64(w, prefix + "W_q").T + f64(w, prefix + "b_q"))
    k = phi(x @ f64(w, prefix + "W_k").T + f64(w, prefix + "b_k"))
    v = x @ f64(w, prefix + "W_v").T + f64(w, prefix + "b_v")
    a = np.tril(q @ k.T)  # [t, u]: φ(q_t)·φ(k_u) for u ≤ t
    return (a @ v) / a.sum(-1, keepdims=True)


def reference(model: Model, x: np.ndarray) -> np.ndarray:
    w, hp = model.weights, model.config.hyperparameters
    out = []
    for row in x:
        X = embed(row, w)
        for i in range(hp["L"]):
            p = f"layers.{i}."
            Xn = layer_norm(X, f64(w, p + "gamma_1"), f64(w, p + "beta_1"), hp["eps"])
            heads = [linear_head(Xn, w, f"{p}W.heads.{h}.W_qkv.") for h in range(hp["H"])]
            X = X + np.concatenate(heads, -1) @ f64(w, p + "W.W_o").T + f64(w, p + "W.b_o")
            Xn = layer_norm(X, f64(w, p + "gamma_2"), f64(w, p + "beta_2"), hp["eps"])
            X = X + mlp(Xn, w, p)
        X = layer_norm(X, f64(w, "gamma"), f64(w, "beta"), hp["eps"])
        out.append(softmax(X @ f64(w, "W_u").T))
    return np.stack(out)


def test_checks() -> None:
    assert_checks("linear_attention")


@pytest.mark.parametrize("shape", SHAPES)
def test_matches_numpy(model: Model, shape: tuple[int, int]) -> None:
    x = tokens(*shape, vocab=model.config.hyperparameters["N_V"], seed=sum(shape))
    on_every_backend(model, {"x": x}, "P", reference(model, x))


def test_matches_numpy_on_tvm(model: Model) -> None:
    x = tokens(2, 7, vocab=model.config.hyperparameters["N_V"], seed=3)
    on_tvm(model, {"x": x}, "P", reference(model, x))


def test_the_prefix_sums_are_running_sums(model: Model) -> None:
    """Two CUMSUM per head and layer, and nothing over ℓ × ℓ: no mask, no softmax but the vocabulary's."""
    ops = fused_ops(model)
    hp = model.config.hyperparameters
    assert ops[Op.CUMSUM] == 2 * hp["H"] * hp["L"]
    assert ops[Op.INDEX_MASK] == ops[Op.LE] == 0 and ops[Op.SOFTMAX] == 1 and ops[Op.ATTENTION] == 0
