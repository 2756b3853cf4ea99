"""top-k and argtop-k over an index (issue 27 item 2): the k largest entries of a column, largest first, and their
positions, against numpy, on the interpreter, ONNX Runtime and TVM, in the Unicode, ASCII and LaTeX spellings; and
each misuse as one located diagnostic that says how to write it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pseudoformer.base.errors import CompileError
from pseudoformer.ir import Op
from pseudoformer.model import check, load
from tests.frontend.notation_run import run_both, write

RNG = np.random.default_rng(28)

TOPK = """Algorithm: Y ← Route(G, X)
  Input: G ∈ ℝ^{E × ℓ}, X ∈ ℝ^{E × ℓ}
  Output: Y ∈ ℝ^{k × ℓ}
  Hyperparameters: k ∈ ℕ
  1 for t ∈ [ℓ] : R[:, t] ← argtop-k_{j ∈ [E]} G[j, t]
  2 for t ∈ [ℓ] : P[:, t] ← softmax(top-k_{j ∈ [E]} G[j, t])
  3 for c ∈ [k], t ∈ [ℓ] : Y[c, t] ← P[c, t] X[R[c, t], t] + R[c, t] + max_{j ∈ [E]} G[j, t] − (top-2_j G[j, t])[1]
  4 return Y
"""
ASCII = TOPK.replace("∈", "in").replace("ℝ", "R").replace("×", "*").replace("ℓ", "ell").replace(
    "−", "-").replace("←", "<-").replace("argtop-k", "argtopk")
LATEX = TOPK.replace("argtop-k_{j ∈ [E]}", "\\operatorname{argtop-k}_{j \\in [E]}").replace(
    "softmax(top-k_{j ∈ [E]}", "softmax(\\operatorname{top-k}_{j \\in [E]}").replace("top-2_j", "top-{k}_j")


def _want(g: np.ndarray, x: np.ndarray, k: int) -> np.ndarray:
    """Written from the formula, on [batch, ℓ, E] inputs; ties go to the lower position (a stable sort)."""
    r = np.argsort(-g, axis=-1, kind="stable")[..., :k]  # 0-based positions
    v = np.take_along_axis(g, r, -1)
    p = np.exp(v - v.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return p * np.take_along_axis(x, r, -1) + (r + 1) + g.max(-1, keepdims=True) - v[..., :1]


@pytest.mark.parametrize("source", [TOPK, ASCII, LATEX], ids=["unicode", "ascii", "latex"])
def test_top_k_values_and_positions(tmp_path: Path, source: str) -> None:
    model = load(write(tmp_path, source), defines=["E=5", "k=2"])
    g = RNG.standard_normal((2, 4, 5)).astype(np.float32)  # [batch, ℓ, E]
    g[0, 0, 1] = g[0, 0, 3] = g[0, 0].max() + 1  # a tie: the lower position comes first
    x = RNG.standard_normal((2, 4, 5)).astype(np.float32)
    got = run_both(model, G=g, X=x)["Y"]
    np.testing.assert_allclose(got, _want(g, x, 2), rtol=1e-5, atol=1e-5)
    assert got[0, 0, 1] - got[0, 0, 0] != 0  # positions 2 and 4 in that order: the tie is broken as stated
    topks = [n for n in model.graph.nodes() if n.op is Op.TOPK]
    assert {n.attrs["k"] for n in topks} == {2} and {n.attrs["result"] for n in topks} == {"values", "indices"}
    assert check(write(tmp_path, source)) == ["Route"]  # and without a configuration, k symbolic


def test_top_k_on_tvm(tmp_path: Path) -> None:
    pytest.importorskip("tvm")
    from pseudoformer.deploy_tvm import compile_model

    model = load(write(tmp_path, TOPK), defines=["E=5", "k=3"])
    g = RNG.standard_normal((2, 4, 5)).astype(np.float32)
    x = RNG.standard_normal((2, 4, 5)).astype(np.float32)
    got = compile_model(model).run(G=g, X=x)["Y"]
    np.testing.assert_allclose(got, _want(g, x, 3), rtol=1e-5, atol=1e-5)


def assert_one_error(path: Path, at: tuple[int, int], message: str) -> None:
    with pytest.raises(CompileError) as info:
        load(path, defines=["E=5", "k=2"])
    (err,) = info.value.errors
    assert (err.pos.line, err.pos.col) == at and message in err.message, err.render()


@pytest.mark.parametrize("line,col,message", [
    ("for t ∈ [ℓ] : R[:, t] ← topk(G[:, t], k)", 29, "top-k is written over an index: top-k_{j ∈ [E]} G[j, t] for "
     "the k largest entries of column t, argtop-k_{j ∈ [E]} G[j, t] for their positions"),
    ("for t ∈ [ℓ] : R[:, t] ← top-m_{j ∈ [E]} G[j, t]", 29, "unknown size m in top-m: declare it"),
    ("for t ∈ [ℓ] : R[:, t] ← top-7_{j ∈ [E]} G[j, t]", 29, "top-7 picks 7 of 5 entries"),
    ("for t ∈ [ℓ] : R[:, t] ← top-k_{j ∈ [E]} G[1, t]", 29, "top-k_j picks entries over j, and this term does not"),
])
def test_top_k_misuse(tmp_path: Path, line: str, col: int, message: str) -> None:
    assert_one_error(write(tmp_path, TOPK.split("  1 ")[0] + f"  1 {line}\n  2 return Y = R\n"), (5, col), message)
