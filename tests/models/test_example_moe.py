"""models/examples/moe.alg against numpy: top-k routing with k = 2 (Shazeer et al., 2017; Fedus et al., 2022),
each token through its two best experts weighted by the softmax of their two router scores; and the experts run
sparsely: each token's rows go to their experts' products (EXPERT_MATMUL), so no ℓ × E × d_mlp × d_e product and
no per-token copy of an expert's matrix exists."""

from __future__ import annotations

import numpy as np

from pseudoformer.ir import Op
from pseudoformer.model import Model
from pseudoformer.optimize import optimize
from tests.models.examples_numpy import (
    causal,
    f64,
    fused_ops,
    mha,
    pre_norm_lm,
    relu,
    softmax,
    token_lm_tests,
    tokens,
)


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
    return pre_norm_lm(model, x, lambda Xn, p: mha(Xn, Xn, w, p + "W.", hp["H"], lambda h, ell: causal(ell)),
                       ffn=lambda Xn, p: experts(Xn, w, p + "M.", k))


model, test_checks, test_matches_numpy, test_matches_numpy_on_tvm = token_lm_tests("moe", reference)


def test_the_second_expert_matters(model: Model) -> None:
    x = tokens(1, 16, vocab=model.config.hyperparameters["N_V"], seed=4)
    assert np.abs(model.run(x=x)["P"] - reference(model, x, k=1)).max() > 1e-3


def test_each_token_runs_its_two_experts_only(model: Model) -> None:
    """Every product over the experts' weights is one EXPERT_MATMUL by the tokens' routes (two per layer): no
    gather copies an expert's matrix per token, and nothing multiplies all E experts; the routes are one TOPK."""
    hp = model.config.hyperparameters
    graph = optimize(model.graph, 2)
    products = [n for n in graph.nodes() if n.op is Op.EXPERT_MATMUL]
    assert len(products) == 2 * hp["L"]
    assert {n.src[0].attrs["name"].rsplit(".", 1)[-1] for n in products} == {"W_1", "W_2"}
    assert not [n for n in graph.nodes() if n.op is Op.GATHER and n.src[0].type.rank == 3]
    assert all(n.src[1].op is Op.TOPK and n.src[1].attrs["k"] == 2 for n in products)
    ops = fused_ops(model)
    assert ops[Op.ATTENTION] == hp["L"] and ops[Op.SOFTMAX] == 1 + hp["L"]  # the output's, and each layer's gates
