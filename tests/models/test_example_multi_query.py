"""models/examples/multi_query.alg against numpy: Shazeer's multi-query attention, H query heads over one
shared key and value projection, in a pre-norm causal decoder."""

from __future__ import annotations

import math

import numpy as np

from pseudoformer.ir import Op
from pseudoformer.model import Model
from pseudoformer.optimize import optimize
from tests.models.examples_numpy import (
    assert_fused,
    causal,
    f64,
    pre_norm_lm,
    softmax,
    token_lm_tests,
)


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
    return pre_norm_lm(model, x, lambda Xn, p: mqa(Xn, w, p + "W.", hp["H"]))


model, test_checks, test_matches_numpy, test_matches_numpy_on_tvm = token_lm_tests(
    "multi_query", reference, tvm_shape=(2, 7))


def test_one_attention_per_layer_over_one_key_head(model: Model) -> None:
    """The H heads are one causal attention whose keys and values have one head: [batch, 1, ℓ, d]."""
    assert_fused(model, attentions=model.config.hyperparameters["L"])
    for n in optimize(model.graph, 2).nodes():
        if n.op is Op.ATTENTION:
            assert n.attrs["causal"] and n.src[0].type.shape[1] == 4 and n.src[1].type.shape[1] == 1
