"""The paper's Algorithms 1–7, compiled as standalone models, against numpy written from the paper's text."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.model import load

PRIMS = "models/paper/primitives.alg"
RNG = np.random.default_rng(0)


def _model(entry: str, **hyper: int):
    return load(PRIMS, entry=entry, defines=[f"{k}={v}" for k, v in hyper.items()], seed=3)


def test_alg1_token_embedding() -> None:
    m = _model("1", d_e=6, N_V=9)
    v = np.array([0, 8, 3])
    np.testing.assert_allclose(m.run(v=v)["e"], m.weights["W_e"][:, v].T, rtol=1e-6)


def test_alg2_positional_embedding_takes_0_based_positions() -> None:
    m = _model("2", d_e=6, ell_max=10)
    pos = np.array([0, 9, 4])
    np.testing.assert_allclose(m.run(ell=pos)["e_p"], m.weights["W_p"][:, pos].T, rtol=1e-6)


def test_alg3_single_query_attention() -> None:
    m = _model("3", d_in=5, d_attn=4, d_out=3)
    w = m.weights
    e = RNG.standard_normal((2, 5)).astype(np.float32)
    ctx = RNG.standard_normal((2, 7, 5)).astype(np.float32)  # e_1 … e_T as rows
    got = m.run(e=e, e_1_T=ctx)["v_tilde"]
    for b in range(2):
        q = w["W_q"] @ e[b] + w["b_q"]
        k = ctx[b] @ w["W_k"].T + w["b_k"]
        v = ctx[b] @ w["W_v"].T + w["b_v"]
        s = k @ q / np.sqrt(4)
        alpha = np.exp(s) / np.exp(s).sum()
        np.testing.assert_allclose(got[b], alpha @ v, rtol=1e-5, atol=1e-6)


def _attention(w: dict, X: np.ndarray, Z: np.ndarray, mask: np.ndarray, prefix: str = "") -> np.ndarray:
    """Algorithm 4 on one example, X: d_x × ℓ_x, Z: d_z × ℓ_z, mask: ℓ_z × ℓ_x."""
    Q = w[prefix + "W_q"] @ X + w[prefix + "b_q"][:, None]
    K = w[prefix + "W_k"] @ Z + w[prefix + "b_k"][:, None]
    V = w[prefix + "W_v"] @ Z + w[prefix + "b_v"][:, None]
    S = np.where(mask, K.T @ Q, -np.inf) / np.sqrt(Q.shape[0])
    A = np.exp(S - S.max(0)) / np.exp(S - S.max(0)).sum(0)
    return V @ A


@pytest.mark.parametrize("lx,lz", [(5, 5), (3, 6)])
def test_alg4_masked_attention_with_a_mask_input(lx: int, lz: int) -> None:
    m = _model("4", d_x=6, d_z=5, d_attn=4, d_out=3)
    X = RNG.standard_normal((2, lx, 6)).astype(np.float32)
    Z = RNG.standard_normal((2, lz, 5)).astype(np.float32)
    mask = RNG.random((lx, lz)) > 0.3  # the interface takes matrices transposed: [ℓ_x, ℓ_z]
    mask[:, 0] = True  # every query sees something
    got = m.run(X=X, Z=Z, Mask=mask)["V_tilde"]
    for b in range(2):
        want = _attention(m.weights, X[b].T, Z[b].T, mask.T)
        np.testing.assert_allclose(got[b], want.T, rtol=1e-5, atol=1e-6)


def test_alg5_multi_head_attention() -> None:
    m = _model("MHAttention", d_x=6, d_z=6, d_attn=2, d_mid=3, d_out=4, H=3)
    X = RNG.standard_normal((2, 5, 6)).astype(np.float32)
    Z = RNG.standard_normal((2, 4, 6)).astype(np.float32)
    mask = np.ones((5, 4), dtype=bool)
    got = m.run(X=X, Z=Z, Mask=mask)["V_tilde"]
    w = m.weights
    for b in range(2):
        Y = np.concatenate([_attention(w, X[b].T, Z[b].T, mask.T, f"heads.{h}.") for h in range(3)])
        want = w["W_o"] @ Y + w["b_o"][:, None]
        np.testing.assert_allclose(got[b], want.T, rtol=1e-5, atol=1e-6)


def test_alg6_layer_norm_has_no_epsilon() -> None:
    m = _model("layer_norm", d_e=7)
    e = RNG.standard_normal((3, 7)).astype(np.float32)
    mu = e.mean(1, keepdims=True)
    var = ((e - mu) ** 2).mean(1, keepdims=True)
    want = (e - mu) / np.sqrt(var) * m.weights["gamma"] + m.weights["beta"]
    np.testing.assert_allclose(m.run(e=e)["e_hat"], want, rtol=1e-5, atol=1e-5)


def test_alg7_unembedding_is_a_distribution() -> None:
    m = _model("Unembedding", d_e=5, N_V=11)
    e = RNG.standard_normal((2, 5)).astype(np.float32)
    logits = e @ m.weights["W_u"].T
    want = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    got = m.run(e=e)["p"]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_allclose(got.sum(1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("source", ["models/paper/dtransformer.alg", "models/paper/etransformer.alg"])
def test_algs_9_and_10_output_distributions(source: str) -> None:
    defines = dict(L=2, H=2, d_e=8, d_mlp=16, d_attn=4, d_mid=4, ell_max=16, N_V=11, d_f=8)
    if "dtransformer" in source:
        defines.pop("d_f")
    m = load(source, defines=[f"{k}={v}" for k, v in defines.items()])
    P = m.run(x=np.array([[1, 2, 3, 4, 5]]))["P"]
    assert P.shape == (1, 5, 11)
    np.testing.assert_allclose(P.sum(-1), 1.0, rtol=1e-5)


def test_alg10_is_causal() -> None:
    """Changing a later token never changes an earlier position's distribution."""
    defines = [f"{k}={v}" for k, v in dict(L=2, H=2, d_e=8, d_mlp=16, d_attn=4, d_mid=4, ell_max=16, N_V=11).items()]
    m = load("models/paper/dtransformer.alg", defines=defines)
    a = m.run(x=np.array([[1, 2, 3, 4, 5]]))["P"]
    b = m.run(x=np.array([[1, 2, 3, 9, 0]]))["P"]
    np.testing.assert_allclose(a[0, :3], b[0, :3], rtol=1e-6)
    assert np.abs(a[0, 3:] - b[0, 3:]).max() > 1e-4


def test_alg8_encoder_decoder_runs_with_two_lengths() -> None:
    defines = dict(L_enc=2, L_dec=2, H=2, d_e=8, d_mlp=16, d_attn=4, d_mid=4, ell_max=16, N_V=11)
    m = load("models/paper/edtransformer.alg", defines=[f"{k}={v}" for k, v in defines.items()])
    P = m.run(z=np.array([[1, 2, 3, 4, 5, 6]]), x=np.array([[7, 8, 9]]))["P"]
    assert P.shape == (1, 3, 11)
    np.testing.assert_allclose(P.sum(-1), 1.0, rtol=1e-5)
