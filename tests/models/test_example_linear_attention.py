"""models/examples/linear_attention.alg against numpy: Katharopoulos et al.'s causal linear attention,
V'_t = Σ_{u ≤ t} (φ(q_t)·φ(k_u)) v_u / Σ_{u ≤ t} φ(q_t)·φ(k_u) with φ = elu + 1, written here as the
quadratic sum over the positions u ≤ t; the model computes it with two running sums."""

from __future__ import annotations

import numpy as np

from pseudoformer.ir import Op
from pseudoformer.model import Model
from tests.models.examples_numpy import (
    f64,
    fused_ops,
    pre_norm_lm,
    token_lm_tests,
)


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

    def attention(Xn: np.ndarray, p: str) -> np.ndarray:
        heads = [linear_head(Xn, w, f"{p}W.heads.{h}.W_qkv.") for h in range(hp["H"])]
        return np.concatenate(heads, -1) @ f64(w, p + "W.W_o").T + f64(w, p + "W.b_o")

    return pre_norm_lm(model, x, attention)


model, test_checks, test_matches_numpy, test_matches_numpy_on_tvm = token_lm_tests(
    "linear_attention", reference, tvm_shape=(2, 7))


def test_the_prefix_sums_are_running_sums(model: Model) -> None:
    """Two CUMSUM per head and layer, and nothing over ℓ × ℓ: no mask, no softmax but the vocabulary's."""
    ops = fused_ops(model)
    hp = model.config.hyperparameters
    assert ops[Op.CUMSUM] == 2 * hp["H"] * hp["L"]
    assert ops[Op.INDEX_MASK] == ops[Op.LE] == 0 and ops[Op.SOFTMAX] == 1 and ops[Op.ATTENTION] == 0
