"""models/examples/gemma2.alg against numpy: Gemma 2's decoder (Gemma Team, 2024) — local sliding-window
layers alternating with global ones, soft-capped scores c·tanh(S/c) and logits, GeGLU, (1 + γ) RMS norms
before and after each sub-layer, RoPE and grouped-query heads, the embedding scaled by √d_e and tied."""

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
    grid,
    softmax,
    token_lm_tests,
    tokens,
)


def norm(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * (1.0 + gamma)


def rope(x: np.ndarray, base: float) -> np.ndarray:
    """Rotate half: coordinates i and i + d/2 of position t (from 0) by t·base^{−2i/d}."""
    d = x.shape[-1]
    angle = np.arange(len(x))[:, None] * base ** (-2.0 * np.arange(d // 2) / d)
    a, b = x[:, : d // 2], x[:, d // 2:]
    return np.concatenate([a * np.cos(angle) - b * np.sin(angle), b * np.cos(angle) + a * np.sin(angle)], -1)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def attention(x: np.ndarray, w, p: str, hp, local: bool, cap: float) -> np.ndarray:  # noqa: ANN001
    group = hp["H"] // hp["H_kv"]
    keep = causal(len(x))
    if local:
        tx, tz = grid(len(x))
        keep &= tx - tz < hp["w"]
    ys = []
    for h in range(hp["H"]):
        g = h // group
        q = rope(x @ f64(w, f"{p}heads.{h}.W_q").T, hp["b"])
        k = rope(x @ f64(w, f"{p}g.{g}.W_k").T, hp["b"])
        v = x @ f64(w, f"{p}g.{g}.W_v").T
        s = q @ k.T / math.sqrt(q.shape[-1])
        s = cap * np.tanh(s / cap) if cap else s
        ys.append(softmax(np.where(keep, s, -np.inf)) @ v)
    return np.concatenate(ys, -1) @ f64(w, p + "W_o").T


def reference(model: Model, x: np.ndarray, cap: float | None = None, alternate: bool = True) -> np.ndarray:
    w, hp = model.weights, model.config.hyperparameters
    cap = hp["c"] if cap is None else cap
    eps = hp["eps"]
    out = []
    for row in x:
        X = math.sqrt(hp["d_e"]) * f64(w, "W_e").T[row]
        for i in range(hp["L"]):
            p = f"layers.{i}."
            local = i % 2 == 0 if alternate else True  # layer l = i + 1 is local when l is odd
            a = attention(norm(X, f64(w, p + "gamma_1"), eps), w, p + "W.", hp, local, cap)
            X = X + norm(a, f64(w, p + "gamma_2"), eps)
            Xn = norm(X, f64(w, p + "gamma_3"), eps)
            m = (gelu_tanh(Xn @ f64(w, p + "W_gate").T) * (Xn @ f64(w, p + "W_up").T)) @ f64(w, p + "W_down").T
            X = X + norm(m, f64(w, p + "gamma_4"), eps)
        logits = norm(X, f64(w, "gamma"), eps) @ f64(w, "W_e")
        out.append(softmax(hp["c_f"] * np.tanh(logits / hp["c_f"])))
    return np.stack(out)


model, test_checks, test_matches_numpy, test_matches_numpy_on_tvm = token_lm_tests("gemma2", reference)


def test_the_cap_and_the_alternation_matter(model: Model) -> None:
    x = tokens(1, 16, vocab=model.config.hyperparameters["N_V"], seed=4)
    got = model.run(x=x)["P"]
    assert np.abs(got - reference(model, x, cap=0.0)).max() > 1e-3
    assert np.abs(got - reference(model, x, alternate=False)).max() > 1e-3


def test_each_layer_is_one_attention_of_its_own_kind(model: Model) -> None:
    """Local layers a causal attention with window=w, global ones without; every one soft-capped; no mask
    operand, no softmax but the vocabulary's."""
    hp = model.config.hyperparameters
    assert_fused(model, attentions=hp["L"])
    atts = [n for n in optimize(model.graph, 2).nodes() if n.op is Op.ATTENTION]
    assert [(len(a.src), a.attrs.get("window", 0), a.attrs["softcap"]) for a in atts] == \
        [(3, hp["w"], hp["c"]), (3, 0, hp["c"])] * (hp["L"] // 2)
