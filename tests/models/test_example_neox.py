"""models/examples/neox.alg against numpy: GPT-NeoX's parallel residual, x + Attn(LN₁(x)) + MLP(LN₂(x)), with
the first r coordinates of each head's queries and keys rotated (rotate half within them) and the rest not."""

from __future__ import annotations

import math

import numpy as np

from pseudoformer.ir import Op
from pseudoformer.model import Model
from pseudoformer.optimize import optimize, refusals
from tests.models.examples_numpy import (
    causal,
    f64,
    fused_ops,
    layer_norm,
    mlp,
    softmax,
    token_lm_tests,
    tokens,
)
from tests.models.test_example_gemma2 import rope


def head(x: np.ndarray, w, p: str, r: int, base: float) -> np.ndarray:  # noqa: ANN001
    q, k, v = (x @ f64(w, f"{p}W_{n}").T + f64(w, f"{p}b_{n}") for n in "qkv")
    q, k = (np.concatenate([rope(t[:, :r], base), t[:, r:]], -1) for t in (q, k))
    s = np.where(causal(len(x)), q @ k.T / math.sqrt(q.shape[-1]), -np.inf)
    return softmax(s) @ v


def reference(model: Model, x: np.ndarray, r: int | None = None) -> np.ndarray:
    w, hp = model.weights, model.config.hyperparameters
    r = hp["r"] if r is None else r
    out = []
    for row in x:
        X = f64(w, "W_e").T[row]
        for i in range(hp["L"]):
            p = f"layers.{i}."
            a = layer_norm(X, f64(w, p + "gamma_1"), f64(w, p + "beta_1"), hp["eps"])
            b = layer_norm(X, f64(w, p + "gamma_2"), f64(w, p + "beta_2"), hp["eps"])
            heads = [head(a, w, f"{p}W.heads.{h}.W_qkv.", r, hp["b"]) for h in range(hp["H"])]
            attn = np.concatenate(heads, -1) @ f64(w, p + "W.W_o").T + f64(w, p + "W.b_o")
            X = X + attn + mlp(b, w, p)
        X = layer_norm(X, f64(w, "gamma"), f64(w, "beta"), hp["eps"])
        out.append(softmax(X @ f64(w, "W_u").T))
    return np.stack(out)


model, test_checks, test_matches_numpy, test_matches_numpy_on_tvm = token_lm_tests("neox", reference)


def test_the_rotation_is_partial(model: Model) -> None:
    x = tokens(1, 16, vocab=model.config.hyperparameters["N_V"], seed=4)
    got = model.run(x=x)["P"]
    for r in (0, model.config.hyperparameters["d_attn"]):
        assert np.abs(got - reference(model, x, r=r)).max() > 1e-3


def test_the_parallel_layer_norms_fuse_and_each_head_is_one_attention(model: Model) -> None:
    """CSE shares the normalisation of LN₁(x) and LN₂(x); both still fuse (2 per layer and the final one). The
    partially rotated heads are one attention each: batching them over the heads is not done yet, and
    --refusals says why, at the user's line."""
    hp = model.config.hyperparameters
    ops = fused_ops(model)
    assert ops[Op.LAYER_NORM] == 2 * hp["L"] + 1 and ops[Op.ATTENTION] == hp["H"] * hp["L"]
    assert ops[Op.SOFTMAX] == 1 and ops[Op.WHERE] == 0
    assert sum(n.op is Op.DIV and n.type.rank == 3 for n in optimize(model.graph, 2).nodes()) <= 2 * hp["L"]
    (note,) = refusals(model.graph, 2)
    assert note.message.startswith(f"head_batching refused {hp['L']} times: head 1's q, k is not a projection")
    assert note.pos.file.endswith("neox.alg") and note.count == hp["L"]
