"""A computed index into per-example data of three indices that shares a map variable with it (issue 27 item 6's
last bullet, item 10): a ViT's patches X[c, p⌊(t − 1)/n⌋ + i, p((t − 1) mod n) + j] are one gather and one
gather_elements, not a one-hot sum over the image's rows; against numpy on the interpreter, ONNX Runtime and
TVM, and an index outside the image is a run-time error on each, as a gather's is."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pseudoformer.ir import Op
from pseudoformer.model import load
from tests.frontend.notation_run import run_both, write

PATCHES = """Algorithm: Y ← Patches(X | W)
  Input: X ∈ ℝ^{C × h × w}, an image of C channels.
  Output: Y ∈ ℝ^{d × N}
  Hyperparameters: p, n ∈ ℕ, the patch side and the patches per side.
  Hyperparameters: d, N ∈ ℕ
  Parameters: W ∈ ℝ^{d × C × p × p}
  1 for t ∈ [N], c ∈ [C], i ∈ [p], j ∈ [p] : Z[t, c, i, j] ← X[c, p ⌊(t − 1) / n⌋ + i, p ((t − 1) mod n) + j]
  2 for k ∈ [d], t ∈ [N] : Y[k, t] ← Σ_c Σ_i Σ_j W[k, c, i, j] Z[t, c, i, j]
  3 return Y
"""
SIZES = ["C=3", "h=6", "w=6", "p=2", "n=3", "N=9", "d=5"]


def _patches(x: np.ndarray, p: int, n: int) -> np.ndarray:
    """[batch, C, h, w] → [batch, N, C, p, p], patches in row-major order (t − 1 = row · n + column)."""
    b, c = x.shape[:2]
    return x[:, :, :n * p, :n * p].reshape(b, c, n, p, n, p).transpose(0, 2, 4, 1, 3, 5).reshape(b, n * n, c, p, p)


def test_vit_patches_are_gathered_not_summed_one_hot(tmp_path: Path) -> None:
    model = load(write(tmp_path, PATCHES), defines=SIZES)
    ops = [n.op for n in model.graph.nodes()]
    assert ops.count(Op.GATHER_ELEMENTS) == 1 and ops.count(Op.GATHER) == 1
    assert not [n for n in model.graph.nodes() if n.op is Op.EQ and n.type.rank >= 3]  # no one-hot over rows
    x = np.random.default_rng(7).standard_normal((2, 3, 6, 6)).astype(np.float32)
    want = np.einsum("kcij,btcij->btk", model.weights["W"], _patches(x, 2, 3))
    np.testing.assert_allclose(run_both(model, X=x)["Y"], want, rtol=1e-5, atol=1e-5)


def test_vit_patches_on_tvm(tmp_path: Path) -> None:
    pytest.importorskip("tvm")
    from pseudoformer.deploy_tvm import compile_model

    model = load(write(tmp_path, PATCHES), defines=SIZES)
    x = np.random.default_rng(8).standard_normal((2, 3, 6, 6)).astype(np.float32)
    want = np.einsum("kcij,btcij->btk", model.weights["W"], _patches(x, 2, 3))
    np.testing.assert_allclose(compile_model(model).run(X=x)["Y"], want, rtol=1e-5, atol=1e-5)


DIAGONAL = """Algorithm: Y ← Halves(X)
  Input: X ∈ ℝ^{C × h × w}
  Output: Y ∈ ℝ^{C × w}
  1 for c ∈ [C], t ∈ [w] : Y[c, t] ← X[c, ⌈t / 2⌉, t]
  2 return Y
"""


def test_an_index_of_shared_variables_only(tmp_path: Path) -> None:
    """X[c, ⌈t/2⌉, t]: the row index has no variable of its own, so the gathered axis goes away."""
    model = load(write(tmp_path, DIAGONAL), defines=["C=2", "h=3", "w=6"])
    assert [n.op for n in model.graph.nodes()].count(Op.GATHER_ELEMENTS) == 1
    x = np.random.default_rng(9).standard_normal((2, 2, 3, 6)).astype(np.float32)
    t = np.arange(6)
    want = x[:, :, (t + 2) // 2 - 1, t]  # [batch, C, w]; the model gives its columns first
    np.testing.assert_allclose(run_both(model, X=x)["Y"], want.transpose(0, 2, 1), rtol=1e-6)


def test_an_index_outside_the_image_is_an_error_when_it_runs(tmp_path: Path) -> None:
    """h = 3 rows, ⌈t/2⌉ reaches 4 at t = 7: the guarded index refuses the read on the interpreter and ORT."""
    from pseudoformer.backends.onnx import OnnxRunner
    from pseudoformer.deploy import lower

    model = load(write(tmp_path, DIAGONAL), defines=["C=2", "h=3", "w=8"])
    x = np.zeros((1, 2, 3, 8), np.float32)
    with pytest.raises(Exception, match="out of range|out of bounds|indices"):
        model.run(X=x)
    with pytest.raises(Exception, match="out of range|out of bounds|indices|GatherElements"):
        OnnxRunner(lower(model, opt_level=2)).run({"X": x})
