"""Numpy written from the formulas, the reference the gallery of models/examples/ is checked against.

Nothing here calls pseudoformer's interpreter: each function is the textbook formula in float64, on
the deployment layout (a sequence is [ℓ, d], rows are positions), with the weights read by their
parameter names. The weights are drawn here too, at a scale where attention is far from uniform, so
a wrong mask, bias or pooling changes the result by much more than the tolerance.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pseudoformer.deploy import lower, run_onnx
from pseudoformer.ir import DType, Op
from pseudoformer.model import Model, check, load
from pseudoformer.optimize import optimize

EXAMPLES = Path(__file__).resolve().parents[2] / "models" / "examples"
TOL = 1e-5
Weights = Mapping[str, np.ndarray]
# What a head h (1-based) adds to its scores over [t_x, t_z] (query rows, key columns), for a sequence of
# length ℓ: a boolean mask, or a dict of `head`'s keywords, mask and bias.
HeadRule = Callable[[int, int], np.ndarray | dict[str, np.ndarray]]


def random_weights(model: Model, seed: int, std: float = 0.4) -> dict[str, np.ndarray]:
    """Weights of the model's shapes with std `std` (0.02, the default init, makes every head nearly
    uniform); layer-norm scales around 1 so that the norms stay norms."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in sorted(model.weights):
        w = rng.normal(0.0, std, model.weights[name].shape)
        if name.rsplit(".", 1)[-1].startswith("gamma"):
            w += 1.0
        out[name] = w.astype(np.float32)
    return out


def load_example(name: str, seed: int = 0, **defines: Any) -> Model:
    """models/examples/NAME.alg with its .toml (and any -D), on random weights of `random_weights`."""
    model = load(EXAMPLES / f"{name}.alg", defines=[f"{k}={v}" for k, v in defines.items()])
    model.weights = random_weights(model, seed)
    return model


def tokens(batch: int, length: int, vocab: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, (batch, length), dtype=np.int64)


# ------------------------------------------------------------------ the formulas

def softmax(s: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """Algorithm 6ε over the features (the last axis)."""
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * gamma + beta


def rms_norm(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """Zhang & Sennrich's RMS norm over the features: no centring, no offset."""
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * gamma


def gelu(x: np.ndarray) -> np.ndarray:
    """The exact GELU, x Φ(x)."""
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0)


def f64(w: Weights, name: str) -> np.ndarray:
    return np.asarray(w[name], dtype=np.float64)


def head(x: np.ndarray, z: np.ndarray, w: Weights, prefix: str, *, mask: np.ndarray | None = None,
         bias: np.ndarray | None = None, biases: bool = True) -> np.ndarray:
    """One head (Algorithm 4) on x [ℓ_x, d], z [ℓ_z, d]: softmax over keys of q·k/√d_attn (+ bias),
    keys outside `mask` [ℓ_x, ℓ_z] left out. The bias is added after the scaling, as ALiBi and T5 do."""
    def proj(v: np.ndarray, p: str) -> np.ndarray:
        out = v @ f64(w, f"{prefix}W_{p}").T
        return out + f64(w, f"{prefix}b_{p}") if biases else out

    q, k, v = proj(x, "q"), proj(z, "k"), proj(z, "v")
    s = q @ k.T / math.sqrt(q.shape[-1])
    if bias is not None:
        s = s + bias
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    return softmax(s) @ v


def mha(x: np.ndarray, z: np.ndarray, w: Weights, prefix: str, heads: int, rule: HeadRule | None = None,
        *, head_path: str = "heads.{h}.", biases: bool = True, out_bias: bool = True) -> np.ndarray:
    """Algorithm 5: the heads `prefix + head_path` (h from 0) side by side, then W_o, b_o. `rule(h, ℓ)`
    gives head h's (1-based) mask over [t_x, t_z], or a dict of `head`'s mask and bias. `biases`,
    `out_bias`: whether the projections and W_o have them (T5's have none)."""
    ys = []
    for h in range(1, heads + 1):
        r = {} if rule is None else rule(h, x.shape[0])
        extra = r if isinstance(r, dict) else {"mask": r}
        ys.append(head(x, z, w, prefix + head_path.format(h=h - 1), biases=biases, **extra))
    out = np.concatenate(ys, -1) @ f64(w, f"{prefix}W_o").T
    return out + f64(w, f"{prefix}b_o") if out_bias else out


def grid(ell: int) -> tuple[np.ndarray, np.ndarray]:
    """1-based positions (t_x, t_z) over [t_x, t_z], as the notation counts."""
    t = np.arange(1, ell + 1)
    return t[:, None], t[None, :]


def causal(ell: int) -> np.ndarray:
    tx, tz = grid(ell)
    return tz <= tx


def embed(x: np.ndarray, w: Weights, positions: bool = True) -> np.ndarray:
    """W_e[:, x[t]] (+ W_p[:, t]) for one sequence, as rows."""
    e = f64(w, "W_e").T[x]
    return e + f64(w, "W_p").T[: len(x)] if positions else e


# A layer's sub-layer on its normalised input, given the layer's prefix "layers.{i}.".
SubLayer = Callable[[np.ndarray, str], np.ndarray]


def pre_norm_layers(X: np.ndarray, w: Weights, hp: Mapping[str, Any], attention: SubLayer,
                    ffn: SubLayer | None = None) -> np.ndarray:
    """Algorithm 10's layers on one embedded sequence X [ℓ, d]: X += attention(LN₁(X)), X += ffn(LN₂(X)),
    the feed-forward part GPT-2's `mlp` unless given; before the final norm."""
    ffn = ffn or (lambda Xn, p: mlp(Xn, w, p))
    for i in range(hp["L"]):
        p = f"layers.{i}."
        Xn = layer_norm(X, f64(w, p + "gamma_1"), f64(w, p + "beta_1"), hp["eps"])
        X = X + attention(Xn, p)
        Xn = layer_norm(X, f64(w, p + "gamma_2"), f64(w, p + "beta_2"), hp["eps"])
        X = X + ffn(Xn, p)
    return X


def pre_norm_lm(model: Model, x: np.ndarray, attention: SubLayer, *, positions: bool = True,
                ffn: SubLayer | None = None) -> np.ndarray:
    """Algorithm 10 on a batch of token ids [batch, ℓ]: embed, `pre_norm_layers`, final norm,
    softmax(X W_uᵀ); the probabilities [batch, ℓ, N_V]."""
    w, hp = model.weights, model.config.hyperparameters
    out = []
    for row in x:
        X = pre_norm_layers(embed(row, w, positions), w, hp, attention, ffn)
        X = layer_norm(X, f64(w, "gamma"), f64(w, "beta"), hp["eps"])
        out.append(softmax(X @ f64(w, "W_u").T))
    return np.stack(out)


def pre_norm_decoder(x: np.ndarray, w: Weights, hp: Mapping[str, Any], rule: HeadRule, *, positions: bool = True,
                     head_path: str = "heads.{h}.") -> np.ndarray:
    """Algorithm 10 (GPT-2's pre-norm decoder, exact GELU) on one sequence of token ids, every layer's
    heads under `rule`; the probabilities [ℓ, N_V]."""
    def attention(Xn: np.ndarray, p: str) -> np.ndarray:
        return mha(Xn, Xn, w, p + "W.", hp["H"], rule, head_path=head_path)

    X = pre_norm_layers(embed(x, w, positions), w, hp, attention)
    X = layer_norm(X, f64(w, "gamma"), f64(w, "beta"), hp["eps"])
    return softmax(X @ f64(w, "W_u").T)


def t5_encoder(x: np.ndarray, w: Weights, hp: Mapping[str, Any],
               rule: Callable[[int], HeadRule]) -> np.ndarray:
    """T5's encoder on one sequence of token ids: pre-RMS-norm layers, heads without biases whose scores
    get layer i's `rule(i)`, a ReLU MLP without biases; the probabilities [ℓ, N_V]."""
    X = embed(x, w, positions=False)
    eps = hp["eps"]
    for i in range(hp["L"]):
        p = f"layers.{i}."
        Xn = rms_norm(X, f64(w, p + "gamma_1"), eps)
        X = X + mha(Xn, Xn, w, p + "W.", hp["H"], rule(i), head_path="heads.{h}.W_qkv.", biases=False,
                    out_bias=False)
        Xn = rms_norm(X, f64(w, p + "gamma_2"), eps)
        X = X + relu(Xn @ f64(w, p + "W_mlp1").T) @ f64(w, p + "W_mlp2").T
    X = rms_norm(X, f64(w, "gamma"), eps)
    return softmax(X @ f64(w, "W_u").T)


def mlp(x: np.ndarray, w: Weights, prefix: str, act: Callable[[np.ndarray], np.ndarray] = gelu) -> np.ndarray:
    hidden = act(x @ f64(w, prefix + "W_mlp1").T + f64(w, prefix + "b_mlp1"))
    return hidden @ f64(w, prefix + "W_mlp2").T + f64(w, prefix + "b_mlp2")


# ------------------------------------------------------------------ the backends and the checks

def on_every_backend(model: Model, inputs: Mapping[str, np.ndarray], output: str,
                     want: np.ndarray) -> None:
    """The interpreter (-O0), ONNX Runtime CPU (-O2) and, where installed, TVM (-O2) each match `want`."""
    assert_close(model.run(**inputs)[output], want, "interpreter")
    assert_close(run_onnx(lower(model, opt_level=2), inputs)[output], want, "onnxruntime")


def on_tvm(model: Model, inputs: Mapping[str, np.ndarray], output: str, want: np.ndarray) -> None:
    pytest.importorskip("tvm.relax", reason="apache-tvm is not installed: pip install pseudoformer[tvm]")
    from pseudoformer.deploy_tvm import compile_model

    assert_close(compile_model(model).run(**inputs)[output], want, "tvm")


def assert_close(got: np.ndarray, want: np.ndarray, where: str) -> None:
    assert got.shape == want.shape, f"{where}: shape {got.shape}, expected {want.shape}"
    err = float(np.abs(got - want).max())
    assert err <= TOL, f"{where}: max error {err:.3g} > {TOL}"


def fused_ops(model: Model) -> Counter:
    """The ops of the model's graph at -O2; WHERE counted only on reals, where it would mask scores (a
    WHERE on int64 is the range check of a computed index, t5_bias's w[t_x − t_z + ℓ_max]), and only between
    two values (where(c, v, v) repeats a learned value over the batch, ViT's [x_cls, E])."""
    return Counter(n.op for n in optimize(model.graph, 2).nodes()
                   if n.op is not Op.WHERE or n.type.dtype is DType.float32 and n.src[1] is not n.src[2])


def assert_fused(model: Model, attentions: int, softmaxes: int = 1) -> None:
    """-O2 leaves one ATTENTION per attention layer (its heads batched) and no per-head masking or softmax:
    the `softmaxes` left are the model's own (the distribution over the vocabulary or the classes). An
    INDEX_MASK may stay: it builds a mask the attention ops take as an operand ([[t_z ≤ t_x]] of the
    prefix LM's [[t_z ≤ t_x ∨ t_z ≤ p]]), once for all layers."""
    ops = fused_ops(model)
    left = {op.name: ops[op] for op in (Op.WHERE,) if ops[op]}
    if ops[Op.SOFTMAX] != softmaxes:
        left[Op.SOFTMAX.name] = ops[Op.SOFTMAX]
    assert ops[Op.ATTENTION] == attentions and not left, \
        f"-O2 has {ops[Op.ATTENTION]} attention ops (want {attentions}), and left {left or 'nothing'}"


def assert_checks(name: str) -> None:
    """`pseudoformer check` of the file, with its config and without one (symbolic sizes)."""
    path = EXAMPLES / f"{name}.alg"
    assert check(path)
    assert check(path, config=os.devnull)


SHAPES = [(2, 9), (1, 16), (3, 1)]  # (batch, ℓ): a batch, a long sequence, one token


def token_lm_tests(name: str, reference: Callable[[Model, np.ndarray], np.ndarray], *,
                   shapes: list[tuple[int, int]] = SHAPES, tvm_shape: tuple[int, int] = (2, 9)) -> tuple:
    """The `model` fixture and the three tests every token-in, P-out example has: `pseudoformer check`,
    `reference` on every backend over `shapes` (seed the sum of the shape), and on TVM over `tvm_shape`
    (seed 3). A test file unpacks them into its names, where pytest finds them:
    model, test_checks, test_matches_numpy, test_matches_numpy_on_tvm = token_lm_tests(...)."""
    @pytest.fixture(scope="module", name="model")
    def model_fixture() -> Model:
        return load_example(name)

    def test_checks() -> None:
        assert_checks(name)

    @pytest.mark.parametrize("shape", shapes)
    def test_matches_numpy(model: Model, shape: tuple[int, int]) -> None:
        x = tokens(*shape, vocab=model.config.hyperparameters["N_V"], seed=sum(shape))
        on_every_backend(model, {"x": x}, "P", reference(model, x))

    def test_matches_numpy_on_tvm(model: Model) -> None:
        x = tokens(*tvm_shape, vocab=model.config.hyperparameters["N_V"], seed=3)
        on_tvm(model, {"x": x}, "P", reference(model, x))

    return model_fixture, test_checks, test_matches_numpy, test_matches_numpy_on_tvm
