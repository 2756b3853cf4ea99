"""Soft-capping (Gemma 2): scores capped as c·tanh(S/c) before the mask fuse into one ATTENTION with
softcap=c (ONNX Attention's softcap attribute, which caps the scaled scores before the mask), and it
computes what the heads as written compute, on the interpreter, ONNX Runtime and TVM."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pseudoformer.ir import Op
from pseudoformer.model import load
from pseudoformer.optimize import optimize, refusals
from tests.frontend.notation_run import run_both, write

CAPPED = """Algorithm: Ṽ ← Capped(X | W_qkv, Mask)
  Input: X ∈ ℝ^{d_x × ℓ}
  Output: Ṽ ∈ ℝ^{d_mid × ℓ}
  Hyperparameters: c ∈ ℝ, the cap.
  Hyperparameters: Mask ∈ {0,1}^{ℓ × ℓ}
  Parameters: W_qkv consisting of:
    W_q, W_k ∈ ℝ^{d_attn × d_x}, W_v ∈ ℝ^{d_mid × d_x}
  1 Q ← W_q X
  2 K ← W_k X
  3 V ← W_v X
  4 S ← CAPPED
  5 ∀t_z, t_x : if ¬Mask[t_z, t_x] then S[t_z, t_x] ← −∞
  6 return Ṽ = V · softmax(S)

Algorithm: Y ← Block(X | 𝒲)
  Input: X ∈ ℝ^{d_x × ℓ}
  Output: Y ∈ ℝ^{d_x × ℓ}
  Hyperparameters: H, number of heads
  Parameters: 𝒲 consisting of:
    For h ∈ [H]:
      W^h_qkv : Capped
    W_o ∈ ℝ^{d_x × H d_mid}
  1 For h ∈ [H]:
  2   Yʰ ← Capped(X | W^h_qkv, Mask[t_z, t_x] ≡ [[t_z ≤ t_x]])
  3 Y ← [Y¹; Y²; …; Y^H]
  4 return W_o Y
"""
SIZES = ["d_x=8", "d_attn=4", "d_mid=4", "H=2", "c=2.0"]


def _model(tmp_path: Path, scores: str):  # noqa: ANN202
    model = load(write(tmp_path, CAPPED.replace("CAPPED", scores)), defines=SIZES)
    model.weights = {k: (v * 20).astype(np.float32) for k, v in model.weights.items()}  # scores past the cap
    return model


@pytest.mark.parametrize("scores", ["c tanh(Kᵀ Q / √d_attn / c)", "tanh((Kᵀ Q / √d_attn) / c) · c"])
def test_a_soft_cap_fuses_and_computes_the_same(tmp_path: Path, scores: str) -> None:
    model = _model(tmp_path, scores)
    (att,) = [n for n in optimize(model.graph, 2).nodes() if n.op is Op.ATTENTION]  # both heads, one op
    assert att.attrs["softcap"] == 2.0 and att.attrs["causal"] and att.attrs["scale"] == 0.5 and len(att.src) == 3
    x = np.random.default_rng(0).standard_normal((2, 7, 8)).astype(np.float32)
    got = run_both(model, X=x)["Y"]
    uncapped = _model(tmp_path, "Kᵀ Q / √d_attn")
    uncapped.weights = model.weights
    assert np.abs(uncapped.run(X=x)["Y"] - got).max() > 1e-2  # the cap is not a no-op at this scale


def test_a_soft_cap_on_tvm(tmp_path: Path) -> None:
    pytest.importorskip("tvm.relax", reason="apache-tvm is not installed: pip install pseudoformer[tvm]")
    from pseudoformer.deploy_tvm import compile_model

    model = _model(tmp_path, "c tanh(Kᵀ Q / √d_attn / c)")
    x = np.random.default_rng(1).standard_normal((2, 5, 8)).astype(np.float32)
    np.testing.assert_allclose(compile_model(model).run(X=x)["Y"], model.run(X=x)["Y"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("scores,why", [
    ("c tanh(Kᵀ Q / c) / √d_attn", "scaled after the cap"),
    ("c tanh((Kᵀ Q + 1) / c)", "inside the soft-cap; only their scale may stand there"),
])
def test_what_the_kernel_cannot_cap_is_refused_with_its_reason(tmp_path: Path, scores: str, why: str) -> None:
    model = _model(tmp_path, scores)
    assert not [n for n in optimize(model.graph, 2).nodes() if n.op is Op.ATTENTION]
    notes = [n.message for n in refusals(model.graph, 2)]
    assert any(why in m for m in notes), notes
