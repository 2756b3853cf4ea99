"""models/examples/moe.alg against numpy: top-2 routing (Shazeer et al., 2017; Fedus et al., 2022), each
token through its two best experts weighted by the softmax of their two router scores; and the experts run
sparsely: each token's expert weights are gathered, so no ℓ × E × d_mlp × d_e product exists."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.ir import Op
from pseudoformer.model import Model
from pseudoformer.optimize import optimize
from tests.models.examples_numpy import (
    assert_checks,
    causal,
    embed,
    f64,
    fused_ops,
    layer_norm,
    load_example,
    mha,
    on_every_backend,
    on_tvm,
    relu,
    softmax,
    tokens,
)

SHAPES = [(2, 9), (1, 16), (3, 1)]


@pytest.fixture(scope="module")
def model() -> Model:
    return load_example("moe")


def experts(x: np.ndarray, w, p: str, k: int = 2) -> np.ndarray:  # noqa: ANN001
    """Each row of x through its k best experts (ties to the lower index), gates the softmax of their scores."""
    g = x @ f64(w, p + "W_r").T  # [ℓ, E]
    best = np.argsort(-g, axis=-1, kind="stable")[:, :k]
    gates = softmax(np.take_along_axis(g, best, -1))
    out = np.zeros_like(x)
    for t in range(len(x)):
        for m in range(k):
            e = best[t, m]
            h = relu(f64(w, p + "W_1")[e] @ x[t] + f64(w, p + "b_1")[e])
            out[t] += gates[t, m] * (f64(w, p + "W_2")[e] @ h + f64(w, p + "b_2")[e])
    return out


def reference(model: Model, x: np.ndarray, k: int = 2) -> np.ndarray:
    w, hp = model.weights, model.config.hyperparameters
    out = []
    for row in x:
        X = embed(row, w)
        for i in range(hp["L"]):
            p = f"layers.{i}."
            Xn = layer_norm(X, f64(w, p + "gamma_1"), f64(w, p + "beta_1"), hp["eps"])
            X = X + mha(Xn, Xn, w, p + "W.", hp["H"], lambda h, ell: causal(ell))
            Xn = layer_norm(X, f64(w, p + "gamma_2"), f64(w, p + "beta_2"), hp["eps"])
            X = X + experts(Xn, w, p + "M.", k)
        X = layer_norm(X, f64(w, "gamma"), f64(w, "beta"), hp["eps"])
        out.append(softmax(X @ f64(w, "W_u").T))
    return np.stack(out)


def test_checks() -> None:
    assert_checks("moe")


@pytest.mark.parametrize("shape", SHAPES)
def test_matches_numpy(model: Model, shape: tuple[int, int]) -> None:
    x = tokens(*shape, vocab=model.config.hyperparameters["N_V"], seed=sum(shape))
    on_every_backend(model, {"x": x}, "P", reference(model, x))


def test_matches_numpy_on_tvm(model: Model) -> None:
    x = tokens(2, 9, vocab=model.config.hyperparameters["N_V"], seed=3)
    on_tvm(model, {"x": x}, "P", reference(model, x))


def test_the_second_expert_matters(model: Model) -> None:
    x = tokens(1, 16, vocab=model.config.hyperparameters["N_V"], seed=4)
    assert np.abs(model.run(x=x)["P"] - reference(model, x, k=1)).max() > 1e-3


def test_each_token_gathers_its_two_experts_only(model: Model) -> None:
    """Every product over the experts' weights reads a gather of them by the tokens' routes: [batch, ℓ, …]
    slices of W_1 and W_2, two per layer each; nothing multiplies all E experts."""
    hp = model.config.hyperparameters
    graph = optimize(model.graph, 2)
    gathered = [n for n in graph.nodes() if n.op is Op.GATHER and n.src[0].op is Op.PARAM
                and n.src[0].attrs["name"].rsplit(".", 1)[-1] in ("W_1", "W_2")]
    assert len(gathered) == 4 * hp["L"]
    assert all(n.type.shape[:2] == ("batch", "seq") and hp["E"] not in n.type.shape for n in gathered)
    ops = fused_ops(model)
    assert ops[Op.ATTENTION] == hp["L"] and ops[Op.SOFTMAX] == 1
