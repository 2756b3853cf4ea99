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


def test_the_parallel_layer_norms_fuse_and_the_partially_rotated_heads_batch(model: Model) -> None:
    """CSE shares the normalisation of LN₁(x) and LN₂(x); both still fuse (2 per layer and the final one). The
    partially rotated heads are batched: one attention per layer, its queries and keys each one rotary of
    every head's first r rows, and nothing is refused."""
    hp = model.config.hyperparameters
    ops = fused_ops(model)
    assert ops[Op.LAYER_NORM] == 2 * hp["L"] + 1 and ops[Op.ATTENTION] == hp["L"]
    assert ops[Op.ROTARY] == 2 * hp["L"]
    assert ops[Op.SOFTMAX] == 1 and ops[Op.WHERE] == 0
    graph = optimize(model.graph, 2)
    assert sum(n.op is Op.DIV and n.type.rank == 3 for n in graph.nodes()) <= 2 * hp["L"]
    rotations = [n for n in graph.nodes() if n.op is Op.ROTARY]
    assert {(n.attrs["rotary_dim"], n.type.shape[1]) for n in rotations} == {(hp["r"], hp["H"])}
    assert refusals(model.graph, 2) == []


def test_onnx_has_one_attention_and_partial_rotary_embeddings_per_layer(model: Model) -> None:
    """On ONNX the batched heads pack: RotaryEmbedding with rotary_embedding_dim = r over all heads at once,
    one Attention per layer, no Softmax but the output's, and the result the interpreter's."""
    from collections import Counter

    from pseudoformer.deploy import lower, run_onnx

    hp = model.config.hyperparameters
    onnx = lower(model)
    ops = Counter(n.op_type for n in onnx.graph.node)
    assert ops["Attention"] == hp["L"] and ops["RotaryEmbedding"] == 2 * hp["L"] and ops["Softmax"] == 1
    dims = {a.i for n in onnx.graph.node if n.op_type == "RotaryEmbedding" for a in n.attribute
            if a.name == "rotary_embedding_dim"}
    assert dims == {hp["r"]}
    x = tokens(2, 9, vocab=hp["N_V"], seed=6)
    assert np.abs(run_onnx(onnx, {"x": x})["P"] - model.run(x=x)["P"]).max() <= 1e-5
