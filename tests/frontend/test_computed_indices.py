"""Computed indices (docs/language.md §5.4): `w[t_x − t_z + ℓ_max]` and `v[p[t]]` are gathers.

An index the sizes keep in range is gathered as it is; one only the run can judge is checked when the
model runs, and an index outside [1, n] is an error on every backend — numpy and ONNX would otherwise
read a negative index from the end of the axis.
"""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.backends.onnx import OnnxRunner, to_onnx
from pseudoformer.ir import Op
from pseudoformer.ir.interpreter import InterpreterError
from pseudoformer.model import load
from pseudoformer.optimize import optimize

# A T5-style learned relative bias: one weight per offset t_x − t_z ∈ [1 − ℓ_max, ℓ_max − 1].
RELATIVE = """Algorithm: Y ← relative_bias(X | w)
  Input: X ∈ ℝ^{ℓ × ℓ}
  Output: Y ∈ ℝ^{ℓ × ℓ}
  Hyperparameters: ℓ_max ∈ ℕ
  Parameters: w ∈ ℝ^{2ℓ_max − 1}
  1 for t_z ∈ [ℓ], t_x ∈ [ℓ] : Y[t_z, t_x] ← X[t_z, t_x] + w[t_x − t_z + ℓ_max]
  2 return Y
"""

# Positions given as data: column p[t] of W for each t.
PICK = """Algorithm: Y ← pick(p | W)
  Input: p ∈ ℝ^{ℓ}
  Output: Y ∈ ℝ^{d × ℓ}
  Hyperparameters: d, n ∈ ℕ
  Parameters: W ∈ ℝ^{d × n}
  1 for t ∈ [ℓ] : Y[:, t] ← W[:, p[t]]
  2 return Y
"""


def _load(tmp_path, source: str, defines: list[str]):  # noqa: ANN202
    path = tmp_path / "m.alg"
    path.write_text(source, encoding="utf-8")
    return load(path, defines=defines)


def _relative_numpy(x: np.ndarray, w: np.ndarray, ell_max: int) -> np.ndarray:
    """x in the deployment layout [batch, t_x, t_z] (the paper's S[t_z, t_x] transposed)."""
    ell = x.shape[-1]
    tz, tx = np.meshgrid(np.arange(ell), np.arange(ell), indexing="ij")
    bias = w[tx - tz + ell_max - 1]  # [t_z, t_x]
    return x + bias.T[None]


def test_relative_bias_is_one_gather(tmp_path) -> None:
    model = _load(tmp_path, RELATIVE, ["ℓ_max=6"])
    x = np.random.default_rng(0).standard_normal((2, 5, 5)).astype(np.float32)
    want = _relative_numpy(x, model.weights["w"], 6)
    np.testing.assert_allclose(model.run(X=x)["Y"], want, rtol=1e-6, atol=1e-6)
    for level in (0, 2):
        graph = optimize(model.graph, level)
        runner = OnnxRunner(to_onnx(graph, model.weights))
        np.testing.assert_allclose(runner.run({"X": x})["Y"], want, rtol=1e-6, atol=1e-6)
    ops = [n.op for n in model.graph.nodes()]
    assert ops.count(Op.GATHER) == 1 and ops.count(Op.ARANGE) == 2  # one gather over an ℓ × ℓ index


def test_an_index_past_the_weights_is_an_error_on_every_backend(tmp_path) -> None:
    """ℓ = 7 > ℓ_max = 6: the offset 6 has no weight. Both ends leave the axis: t_x − t_z + ℓ_max runs
    from 0 (numpy and ONNX would read w[−1], the last weight) to 12."""
    model = _load(tmp_path, RELATIVE, ["ℓ_max=6"])
    x = np.zeros((1, 7, 7), np.float32)
    with pytest.raises(InterpreterError, match=r"gather, .*m\.alg:6 .*out of bounds"):
        model.run(X=x)
    runner = OnnxRunner(to_onnx(model.graph, model.weights))
    with pytest.raises(Exception, match="out of"):  # onnxruntime's own exception type
        runner.run({"X": x})


@pytest.mark.parametrize("bad", [0.0, -1.0, 4.0, 2.5])
def test_data_positions_are_checked_when_the_model_runs(tmp_path, bad: float) -> None:
    """0 and −1 would read the last columns in numpy and ONNX, 2.5 would be cut to 2: all are errors."""
    model = _load(tmp_path, PICK, ["d=2", "n=3"])
    good = np.array([[3.0, 1.0, 2.0]], np.float32)
    w = model.weights["W"]
    np.testing.assert_allclose(model.run(p=good)["Y"], w[:, [2, 0, 1]].T[None], rtol=1e-6)
    runner = OnnxRunner(to_onnx(model.graph, model.weights))
    np.testing.assert_allclose(runner.run({"p": good})["Y"], w[:, [2, 0, 1]].T[None], rtol=1e-6)
    wrong = np.array([[1.0, bad, 2.0]], np.float32)
    with pytest.raises(InterpreterError, match="gather"):
        model.run(p=wrong)
    with pytest.raises(Exception, match="out of"):
        runner.run({"p": wrong})


def test_tvm_refuses_an_index_out_of_range(tmp_path) -> None:
    pytest.importorskip("tvm.relax", reason="apache-tvm is not installed: pip install pseudoformer[tvm]")
    from pseudoformer.backends.tvm import compile_graph

    model = _load(tmp_path, PICK, ["d=2", "n=3"])
    compiled = compile_graph(model.graph, model.weights)
    good = np.array([[3.0, 1.0, 2.0]], np.float32)
    np.testing.assert_allclose(compiled.run({"p": good})["Y"], model.run(p=good)["Y"], rtol=1e-6)
    with pytest.raises(Exception, match="out of range"):
        compiled.run({"p": np.array([[1.0, 0.0, 2.0]], np.float32)})



# Columns at positions given as data replaced: a scatter, the one form no slice or concatenation makes.
PUT = """Algorithm: Y ← put(X, p | V)
  Input: X ∈ ℝ^{d × n}, p ∈ ℝ^{m}
  Output: Y ∈ ℝ^{d × n}
  Hyperparameters: d, m ∈ ℕ
  Parameters: V ∈ ℝ^{d × m}
  1 Y ← X
  2 for t ∈ [m] : Y[:, p[t]] ← 2 V[:, t]
  3 return Y
"""


def test_assignment_at_data_positions_is_one_scatter(tmp_path) -> None:
    model = _load(tmp_path, PUT, ["d=2", "m=2"])
    x = np.random.default_rng(5).standard_normal((2, 5, 2)).astype(np.float32)
    p = np.array([[3, 1], [5, 2]], np.float32)
    want = x.copy()
    for b in range(2):
        for t in range(2):
            want[b, int(p[b, t]) - 1] = 2 * model.weights["V"][:, t]
    np.testing.assert_allclose(model.run(X=x, p=p)["Y"], want, rtol=1e-6)
    for level in (0, 2):
        runner = OnnxRunner(to_onnx(optimize(model.graph, level), model.weights))
        np.testing.assert_allclose(runner.run({"X": x, "p": p})["Y"], want, rtol=1e-6)
    assert [n.op for n in model.graph.nodes()].count(Op.SCATTER) == 1


@pytest.mark.parametrize("bad", [[3.0, 3.0], [0.0, 1.0], [6.0, 1.0], [1.5, 2.0]])
def test_scatter_positions_are_checked_when_the_model_runs(tmp_path, bad: list[float]) -> None:
    """A repeated position would assign an entry twice; 0 would wrap to the last column; 6 is past it."""
    model = _load(tmp_path, PUT, ["d=2", "m=2"])
    x = np.zeros((1, 5, 2), np.float32)
    p = np.array([bad], np.float32)
    with pytest.raises(InterpreterError, match=r"scatter, .*m\.alg:7 .*out of range"):
        model.run(X=x, p=p)
    with pytest.raises(Exception, match="out of"):
        OnnxRunner(to_onnx(model.graph, model.weights)).run({"X": x, "p": p})


def test_reversed_columns(tmp_path) -> None:
    source = """Algorithm: Y ← reverse(X)
  Input: X ∈ ℝ^{d × ℓ}
  Output: Y ∈ ℝ^{d × ℓ}
  1 Y ← X
  2 for t ∈ [ℓ] : Y[:, ℓ + 1 − t] ← X[:, t]
  3 return Y
"""
    model = _load(tmp_path, source, ["d=3"])
    x = np.random.default_rng(6).standard_normal((2, 5, 3)).astype(np.float32)
    np.testing.assert_allclose(model.run(X=x)["Y"], x[:, ::-1], rtol=1e-6)
    runner = OnnxRunner(to_onnx(optimize(model.graph, 2), model.weights))
    np.testing.assert_allclose(runner.run({"X": x})["Y"], x[:, ::-1], rtol=1e-6)


def test_tvm_scatters_and_refuses_repeated_positions(tmp_path) -> None:
    pytest.importorskip("tvm.relax", reason="apache-tvm is not installed: pip install pseudoformer[tvm]")
    from pseudoformer.backends.tvm import compile_graph

    model = _load(tmp_path, PUT, ["d=2", "m=2"])
    compiled = compile_graph(model.graph, model.weights)
    x = np.random.default_rng(7).standard_normal((2, 5, 2)).astype(np.float32)
    p = np.array([[3, 1], [5, 2]], np.float32)
    np.testing.assert_allclose(compiled.run({"X": x, "p": p})["Y"], model.run(X=x, p=p)["Y"], rtol=1e-6)
    with pytest.raises(Exception, match="out of range"):
        compiled.run({"X": x, "p": np.array([[3, 3], [1, 2]], np.float32)})


# Algorithm 13's loss terms: each position's probability of the next token, both per example.
NEXT_TOKEN = """Algorithm: c ← next_token(x, P)
  Input: x ∈ V*, P ∈ ℝ^{N_V × ℓ}
  Output: c ∈ ℝ^{ℓ − 1}
  Hyperparameters: N_V ∈ ℕ
  1 for t ∈ [ℓ − 1] : c[t] ← log(P[x[t + 1], t])
  2 return c
"""


def test_per_example_rows_picked_per_position(tmp_path) -> None:
    model = _load(tmp_path, NEXT_TOKEN, ["N_V=5"])
    rng = np.random.default_rng(8)
    x = rng.integers(0, 5, (2, 6))
    p = rng.random((2, 6, 5)).astype(np.float32) + 0.1  # [batch, ℓ, N_V]
    want = np.log(np.take_along_axis(p[:, :-1], x[:, 1:, None], axis=2)[..., 0])
    np.testing.assert_allclose(model.run(x=x, P=p)["c"], want, rtol=1e-6)
    for level in (0, 2):
        runner = OnnxRunner(to_onnx(optimize(model.graph, level), model.weights))
        np.testing.assert_allclose(runner.run({"x": x, "P": p})["c"], want, rtol=1e-6)
    bad = x.copy()
    bad[1, 3] = 5  # no such token: an error, not a log of 0
    with pytest.raises(InterpreterError, match="gather"):
        model.run(x=bad, P=p)
