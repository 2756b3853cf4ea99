"""models/examples/multi_query.alg against numpy: Shazeer's multi-query attention, H query heads over one
shared key and value projection, in a pre-norm causal decoder."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pseudoformer.ir import Op
from pseudoformer.model import Model
from pseudoformer.optimize import optimize
from tests.models.examples_numpy import (
    assert_checks,
    assert_fused,
    causal,
    embed,
    f64,
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
    return load_example("multi_query")


def mqa(x: np.ndarray, w, p: str, heads: int) -> np.ndarray:  # noqa: ANN001
    k = x @ f64(w, p + "W_k").T + f64(w, p + "b_k")
    v = x @ f64(w, p + "W_v").T + f64(w, p + "b_v")
    ys = []
    for h in range(heads):
        q = x @ f64(w, f"{p}heads.{h}.W_q").T + f64(w, f"{p}heads.{h}.b_q")
        s = np.where(causal(len(x)), q @ k.T / math.sqrt(q.shape[-1]), -np.inf)
        ys.append(softmax(s) @ v)
    return np.concatenate(ys, -1) @ f64(w, p + "W_o").T + f64(w, p + "b_o")


def reference(model: Model, x: np.ndarray) -> np.ndarray:
    w, hp = model.weights, model.config.hyperparameters
    out = []
    for row in x:
        X = embed(row, w)
        for i in range(hp["L"]):
            p = f"layers.{i}."
            Xn = layer_norm(X, f64(w, p + "gamma_1"), f64(w, p + "beta_1"), hp["eps"])
            X = X + mqa(Xn, w, p + "W.", hp["H"])
            Xn = layer_norm(X, f64(w, p + "gamma_2"), f64(w, p + "beta_2"), hp["eps"])
            X = X + mlp(Xn, w, p)
        X = layer_norm(X, f64(w, "gamma"), f64(w, "beta"), hp["eps"])
        out.append(softmax(X @ f64(w, "W_u").T))
    return np.stack(out)


def test_checks() -> None:
    assert_checks("multi_query")


@pytest.mark.parametrize("shape", SHAPES)
def test_matches_numpy(model: Model, shape: tuple[int, int]) -> None:
    x = tokens(*shape, vocab=model.config.hyperparameters["N_V"], seed=sum(shape))
    on_every_backend(model, {"x": x}, "P", reference(model, x))


def test_matches_numpy_on_tvm(model: Model) -> None:
    x = tokens(2, 7, vocab=model.config.hyperparameters["N_V"], seed=3)
    on_tvm(model, {"x": x}, "P", reference(model, x))


def test_one_attention_per_layer_over_one_key_head(model: Model) -> None:
    """The H heads are one causal attention whose keys and values have one head: [batch, 1, ℓ, d]."""
    assert_fused(model, attentions=model.config.hyperparameters["L"])
    for n in optimize(model.graph, 2).nodes():
        if n.op is Op.ATTENTION:
            assert n.attrs["causal"] and n.src[0].type.shape[1] == 4 and n.src[1].type.shape[1] == 1
