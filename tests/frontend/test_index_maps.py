"""Element maps over several indices and entries assigned in pieces (docs/language.md §4, §5.4).

`for i ∈ [d/2], t ∈ [ℓ] : …` is one vectorised map: the graph does not grow with d or ℓ. An index
`i + d/2` reads a slice, `2i − 1` a strided run; row blocks that tile a matrix become one CONCAT and
interleaved rows a stack and reshape. Each is checked on the interpreter and on ONNX Runtime against
numpy, at -O0 and -O2.
"""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.backends.onnx import OnnxRunner, to_onnx
from pseudoformer.ir import Op
from pseudoformer.ir.interpreter import run
from pseudoformer.model import check, load
from pseudoformer.optimize import optimize

ROPE = """Algorithm: Y ← RoPE(X | b)
  Input: X ∈ ℝ^{d × ℓ}
  Output: Y ∈ ℝ^{d × ℓ}
  Hyperparameters: b ∈ ℝ
  1 for i ∈ [d/2], t ∈ [ℓ] : θ[i, t] ← (t − 1) · exp(−2(i − 1) / d · log(b))
  2 for i ∈ [d/2], t ∈ [ℓ] : Y[i, t] ← X[i, t] cos(θ[i, t]) − X[i + d/2, t] sin(θ[i, t])
  3 for i ∈ [d/2], t ∈ [ℓ] : Y[i + d/2, t] ← X[i + d/2, t] cos(θ[i, t]) + X[i, t] sin(θ[i, t])
  4 return Y
"""

# Vaswani et al.'s sinusoidal positions, rows 2i − 1 and 2i interleaved; the second line nests its maps.
SINUSOID = """Algorithm: Y ← add_positions(X)
  Input: X ∈ ℝ^{d × ℓ}
  Output: Y ∈ ℝ^{d × ℓ}
  1 for i ∈ [d/2], t ∈ [ℓ] : W_p[2i − 1, t] ← sin((t − 1) · exp(−2(i − 1) / d · log(10000)))
  2 for t ∈ [ℓ] : for i ∈ [d/2] : W_p[2i, t] ← cos((t − 1) · exp(−2(i − 1) / d · log(10000)))
  3 return Y = X + W_p
"""

# RoFormer's pairing: coordinates 2i − 1 and 2i are read as strided runs.
PAIRS = """Algorithm: Z ← pair_sums(X)
  Input: X ∈ ℝ^{d × ℓ}
  Output: Z ∈ ℝ^{d/2 × ℓ}
  1 for i ∈ [d/2], t ∈ [ℓ] : Z[i, t] ← X[2i − 1, t] − 2 X[2i, t]
  2 return Z
"""


def _rope_numpy(x: np.ndarray, base: float) -> np.ndarray:
    """HuggingFace's rotate-half RoPE on [batch, ℓ, d] (the deployment layout)."""
    _, ell, d = x.shape
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.arange(ell)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    rot = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)
    return x * cos + rot * sin


def _sinusoid_numpy(x: np.ndarray) -> np.ndarray:
    _, ell, d = x.shape
    pe = np.zeros((ell, d))
    ang = np.arange(ell)[:, None] / 10000 ** (np.arange(0, d, 2) / d)[None, :]
    pe[:, 0::2], pe[:, 1::2] = np.sin(ang), np.cos(ang)
    return x + pe


def _load(tmp_path, source: str, defines: list[str]):  # noqa: ANN202
    path = tmp_path / "m.alg"
    path.write_text(source, encoding="utf-8")
    return load(path, defines=defines)


def _check_everywhere(model, x: np.ndarray, want: np.ndarray, out: str) -> None:  # noqa: ANN001
    got = model.run(X=x)[out]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for level in (0, 2):
        graph = optimize(model.graph, level)
        np.testing.assert_allclose(run(graph, {"X": x}, model.weights)[out], want, rtol=1e-5, atol=1e-5)
        runner = OnnxRunner(to_onnx(graph, model.weights))
        np.testing.assert_allclose(runner.run({"X": x})[out], want, rtol=1e-5, atol=1e-5)


def _ops(model) -> list[Op]:  # noqa: ANN001
    return [n.op for n in model.graph.nodes()]


@pytest.mark.parametrize("d", [8, 16])
def test_rope_is_slices_and_one_concat(tmp_path, d: int) -> None:
    model = _load(tmp_path, ROPE, [f"d={d}", "b=10000"])
    x = np.random.default_rng(0).standard_normal((2, 5, d)).astype(np.float32)
    _check_everywhere(model, x, _rope_numpy(x.astype(np.float64), 10000.0), "Y")
    ops = _ops(model)
    # X[i, t] and X[i + d/2, t] are slices (two of each), Y's two row blocks one concat; nothing gathers
    assert ops.count(Op.SLICE) == 4 and ops.count(Op.CONCAT) == 1 and Op.GATHER not in ops


def test_the_graph_does_not_grow_with_d_or_ell(tmp_path) -> None:
    small = _load(tmp_path, ROPE, ["d=8", "b=10000"])
    big = _load(tmp_path, ROPE, ["d=512", "b=10000"])
    assert len(_ops(small)) == len(_ops(big))


def test_interleaved_rows_are_a_stack_and_a_reshape(tmp_path) -> None:
    model = _load(tmp_path, SINUSOID, ["d=8"])
    x = np.random.default_rng(1).standard_normal((2, 7, 8)).astype(np.float32)
    _check_everywhere(model, x, _sinusoid_numpy(x.astype(np.float64)), "Y")
    ops = _ops(model)
    assert ops.count(Op.CONCAT) == 1 and ops.count(Op.RESHAPE) == 1 and Op.GATHER not in ops


def test_strided_reads(tmp_path) -> None:
    model = _load(tmp_path, PAIRS, ["d=8"])
    x = np.random.default_rng(2).standard_normal((2, 3, 8)).astype(np.float32)
    _check_everywhere(model, x, x[..., 0::2] - 2 * x[..., 1::2], "Z")
    # the two runs are gathers at known positions, one each: nothing per coordinate
    assert _ops(model).count(Op.GATHER) == 2


def test_a_block_over_an_earlier_value_keeps_the_rest(tmp_path) -> None:
    source = """Algorithm: Y ← zero_top(X)
  Input: X ∈ ℝ^{d × ℓ}
  Output: Y ∈ ℝ^{d × ℓ}
  1 Y ← X
  2 for i ∈ [2], t ∈ [ℓ] : Y[i + 1, t] ← 2 X[i + 1, t]
  3 return Y
"""
    model = _load(tmp_path, source, ["d=6"])
    x = np.random.default_rng(3).standard_normal((1, 4, 6)).astype(np.float32)
    want = x.copy()
    want[..., 1:3] *= 2
    _check_everywhere(model, x, want, "Y")


@pytest.mark.parametrize("source", [ROPE, SINUSOID, PAIRS])
def test_checked_without_a_config(tmp_path, source: str) -> None:
    """Without sizes d/2 is a size of its own, and 2·(d/2) is d again, so the halves still make d rows."""
    path = tmp_path / "m.alg"
    path.write_text(source, encoding="utf-8")
    assert len(check(path)) == 1


def test_a_value_that_ignores_an_index_is_the_same_along_it(tmp_path) -> None:
    source = """Algorithm: Y ← spread(X)
  Input: X ∈ ℝ^{d × ℓ}
  Output: Y ∈ ℝ^{d × ℓ}
  1 for i ∈ [d], t ∈ [ℓ] : M[i, t] ← t
  2 for i ∈ [d], t ∈ [ℓ] : B[i, t] ← [[t ≤ 2]]
  3 return Y = X + M + B
"""
    model = _load(tmp_path, source, ["d=3"])
    x = np.random.default_rng(4).standard_normal((2, 4, 3)).astype(np.float32)
    t = np.arange(1, 5)[:, None]
    _check_everywhere(model, x, x + t + (t <= 2), "Y")
