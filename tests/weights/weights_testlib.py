"""Tiny HF checkpoints built from configs (random weights, no downloads) and reference forwards.

The reference forwards are written in the paper's notation (X is d_e x positions, y = W x) and
run on *our* weights; agreeing with HF's logits checks the mapping's meaning, not only the
slicing a test author believes is right.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

D_E, HEADS, LAYERS, ELL_MAX, N_V, D_MLP = 32, 4, 2, 64, 101, 64

Expected = dict[str, tuple[tuple[int, ...], str]]


def _layer_params(d_e: int, heads: int, layers: int, d_mlp: int) -> Expected:
    dh = d_e // heads
    out: Expected = {}
    for layer in range(layers):
        p = f"layers.{layer}."
        for h in range(heads):
            for part in "qkv":
                out[f"{p}W.heads.{h}.W_{part}"] = ((dh, d_e), "float32")
                out[f"{p}W.heads.{h}.b_{part}"] = ((dh,), "float32")
        out[p + "W.W_o"] = ((d_e, heads * dh), "float32")
        out[p + "W.b_o"] = ((d_e,), "float32")
        for i in "12":
            out[f"{p}gamma_{i}"] = ((d_e,), "float32")
            out[f"{p}beta_{i}"] = ((d_e,), "float32")
        out[p + "W_mlp1"] = ((d_mlp, d_e), "float32")
        out[p + "b_mlp1"] = ((d_mlp,), "float32")
        out[p + "W_mlp2"] = ((d_e, d_mlp), "float32")
        out[p + "b_mlp2"] = ((d_e,), "float32")
    return out


def gpt2_expected(d_e=D_E, heads=HEADS, layers=LAYERS, ell_max=ELL_MAX, n_v=N_V, d_mlp=4 * D_E) -> Expected:
    """What the frontend declares for gpt2.alg."""
    out = _layer_params(d_e, heads, layers, d_mlp)
    out |= {"W_e": ((d_e, n_v), "float32"), "W_p": ((d_e, ell_max), "float32")}
    out |= {"gamma": ((d_e,), "float32"), "beta": ((d_e,), "float32")}
    return out


def bert_expected(
    mlm: bool = True, d_e=D_E, heads=HEADS, layers=LAYERS, ell_max=ELL_MAX, n_v=N_V, d_mlp=D_MLP
) -> Expected:
    """What the frontend declares for bert.alg: the MLM entry, or the encoder-only one."""
    out = _layer_params(d_e, heads, layers, d_mlp)
    out |= {"W_e": ((d_e, n_v), "float32"), "W_p": ((d_e, ell_max), "float32"), "w_s": ((d_e,), "float32")}
    out |= {"gamma_e": ((d_e,), "float32"), "beta_e": ((d_e,), "float32")}
    if mlm:
        out |= {"W_f": ((d_e, d_e), "float32"), "b_f": ((d_e,), "float32")}
        out |= {"gamma": ((d_e,), "float32"), "beta": ((d_e,), "float32"), "b_u": ((n_v,), "float32")}
    return out


def scramble(model, seed: int = 0):
    """HF initialises biases to 0 and LayerNorm to (1, 0); make every parameter distinctive so a
    bias on the wrong axis or a swapped LayerNorm cannot hide."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name or name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return model.eval()


def gpt2_config(**kw):
    args = dict(
        n_embd=D_E,
        n_head=HEADS,
        n_layer=LAYERS,
        n_positions=ELL_MAX,
        vocab_size=N_V,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2Config(**(args | kw))


def bert_config(**kw):
    args = dict(
        hidden_size=D_E,
        num_attention_heads=HEADS,
        num_hidden_layers=LAYERS,
        intermediate_size=D_MLP,
        vocab_size=N_V,
        max_position_embeddings=ELL_MAX,
    )
    return transformers.BertConfig(**(args | kw))


def save_hf_model(directory: Path, cls, config, seed: int = 0, **save_kw):
    """Build cls(config) with scrambled weights, save_pretrained it to directory; return the model."""
    torch.manual_seed(seed)
    model = scramble(cls(config), seed)
    model.save_pretrained(directory, **save_kw)
    return model


def sd(model) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


# ---- reference forwards in the paper's notation -------------------------------------------------


def layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    m = x.mean(axis=0, keepdims=True)
    v = ((x - m) ** 2).mean(axis=0, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g[:, None] + b[:, None]


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def gelu_erf(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def _mh_attention(w: dict, p: str, x: np.ndarray, heads: int, causal: bool) -> np.ndarray:
    ell = x.shape[1]
    ys = []
    for h in range(heads):
        q = w[f"{p}W.heads.{h}.W_q"] @ x + w[f"{p}W.heads.{h}.b_q"][:, None]
        k = w[f"{p}W.heads.{h}.W_k"] @ x + w[f"{p}W.heads.{h}.b_k"][:, None]
        v = w[f"{p}W.heads.{h}.W_v"] @ x + w[f"{p}W.heads.{h}.b_v"][:, None]
        s = k.T @ q / math.sqrt(q.shape[0])  # [keys, queries]
        if causal:
            s = np.where(np.arange(ell)[:, None] <= np.arange(ell)[None, :], s, -np.inf)
        a = np.exp(s - s.max(axis=0, keepdims=True))
        ys.append(v @ (a / a.sum(axis=0, keepdims=True)))
    return w[p + "W.W_o"] @ np.concatenate(ys, axis=0) + w[p + "W.b_o"][:, None]


def gpt2_logits(w: dict, ids: list[int], heads: int, layers: int, eps: float = 1e-5) -> np.ndarray:
    """[N_V, ell] logits of the decoder-only transformer (pre-LN), unembedding tied to W_e."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    x = w["W_e"][:, ids] + w["W_p"][:, : len(ids)]
    for layer in range(layers):
        p = f"layers.{layer}."
        x = x + _mh_attention(w, p, layer_norm(x, w[p + "gamma_1"], w[p + "beta_1"], eps), heads, causal=True)
        h = layer_norm(x, w[p + "gamma_2"], w[p + "beta_2"], eps)
        x = (
            x
            + w[p + "W_mlp2"] @ gelu_tanh(w[p + "W_mlp1"] @ h + w[p + "b_mlp1"][:, None])
            + w[p + "b_mlp2"][:, None]
        )
    return w["W_e"].T @ layer_norm(x, w["gamma"], w["beta"], eps)


def bert_hidden(w: dict, ids: list[int], heads: int, layers: int, eps: float = 1e-12) -> np.ndarray:
    """[d_e, ell] encoder output (post-LN), single segment."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    x = w["W_e"][:, ids] + w["W_p"][:, : len(ids)] + w["w_s"][:, None]
    x = layer_norm(x, w["gamma_e"], w["beta_e"], eps)
    for layer in range(layers):
        p = f"layers.{layer}."
        x = layer_norm(
            x + _mh_attention(w, p, x, heads, causal=False), w[p + "gamma_1"], w[p + "beta_1"], eps
        )
        h = (
            w[p + "W_mlp2"] @ gelu_erf(w[p + "W_mlp1"] @ x + w[p + "b_mlp1"][:, None])
            + w[p + "b_mlp2"][:, None]
        )
        x = layer_norm(x + h, w[p + "gamma_2"], w[p + "beta_2"], eps)
    return x


def bert_mlm_logits(w: dict, ids: list[int], heads: int, layers: int, eps: float = 1e-12) -> np.ndarray:
    x = bert_hidden(w, ids, heads, layers, eps)
    w = {k: v.astype(np.float64) for k, v in w.items()}
    x = layer_norm(gelu_erf(w["W_f"] @ x + w["b_f"][:, None]), w["gamma"], w["beta"], eps)
    return w["W_e"].T @ x + w["b_u"][:, None]
