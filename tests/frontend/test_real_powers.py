"""Real powers b^{e}: a real exponent expression over a positive base (RoPE's 10000^{−2(i−1)/d}, ALiBi's
2^{−8h/H}), vectorised over map variables; integer powers stay products. Checked against numpy on the
interpreter and ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pseudoformer.base.errors import CompileError
from pseudoformer.frontend.entry import elaborate
from pseudoformer.frontend.modules import load_program
from pseudoformer.ir import Op
from pseudoformer.ir.printer import format_graph
from pseudoformer.model import check
from tests.frontend.notation_run import compile_source, run_both, write

RNG = np.random.default_rng(3)

ANGLES = """Algorithm: y ← Angles(x)
  Input: x ∈ ℝ^{d}
  Output: y ∈ ℝ^{d}
  Hyperparameters: d ∈ ℕ, b ∈ ℝ
  1 for i ∈ [d] : y[i] ← x[i] · b^{−2(i−1)/d} + 10000^{−2(i − 1)/d} + e^{x[i]} + (−1)^{i} + (x[i]² + 1)^{1/3}
  2 return y
"""


def test_real_exponents_over_a_map_variable(tmp_path: Path) -> None:
    model = compile_source(tmp_path, ANGLES, d=6, b=500.0)
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    i = np.arange(1, 7)
    want = x * 500.0 ** (-2 * (i - 1) / 6) + 10000.0 ** (-2 * (i - 1) / 6) + np.exp(x) + (-1.0) ** i \
        + np.cbrt(x**2 + 1)
    np.testing.assert_allclose(run_both(model, x=x)["y"], want, rtol=1e-5, atol=1e-6)


def test_powers_are_one_op_over_all_positions(tmp_path: Path) -> None:
    ops = [n.op for n in compile_source(tmp_path, ANGLES, d=6, b=500.0).graph.nodes()]
    # b^{…}, 10000^{…}, (−1)^{i} and (…)^{1/3}: one POW each over i; e^{x[i]} is exp
    assert ops.count(Op.POW) == 4 and ops.count(Op.EXP) == 1


POSITIONS = """Algorithm: y ← Decay(x)
  Input: x ∈ ℝ^{ℓ}
  Output: y ∈ ℝ^{ℓ}
  1 for t ∈ [ℓ] : y[t] ← x[t] · 2^{−8t/ℓ} + x[t]^{2} + x[t]³
  2 return y
"""


@pytest.mark.parametrize("ell", [1, 5])
def test_an_exponent_of_run_time_sizes(tmp_path: Path, ell: int) -> None:
    model = compile_source(tmp_path, POSITIONS)
    x = RNG.standard_normal((2, ell)).astype(np.float32)
    t = np.arange(1, ell + 1)
    want = x * 2.0 ** (-8 * t / ell) + x**2 + x**3
    np.testing.assert_allclose(run_both(model, x=x)["y"], want, rtol=1e-5, atol=1e-6)
    # whole exponents stay products: only 2^{−8t/ℓ} is a POW
    assert [n.op for n in model.graph.nodes()].count(Op.POW) == 1


SLOPES = """Algorithm: y ← Slopes(x)
  Input: x ∈ ℝ^{d}
  Output: y ∈ ℝ^{d}
  Hyperparameters: d, H ∈ ℕ
  1 y ← 0 x
  2 For h ∈ [H]:
  3   y ← y + 2^{−8h/H} x
  4 return y
"""


def test_a_power_of_loop_variables_and_sizes_is_folded(tmp_path: Path) -> None:
    model = compile_source(tmp_path, SLOPES, d=2, H=3)
    x = np.ones((1, 2), np.float32)
    want = sum(2.0 ** (-8 * h / 3) for h in range(1, 4))
    np.testing.assert_allclose(run_both(model, x=x)["y"], np.full((1, 2), want), rtol=1e-6)
    assert Op.POW not in {n.op for n in model.graph.nodes()}


def test_three_spellings_agree(tmp_path: Path) -> None:
    lines = {"unicode": "for i ∈ [d] : y[i] ← x[i] · b^{−2(i−1)/d} + e^{x[i]}",
             "ascii": "for i in [d] : y[i] <- x[i] * b^{-2(i-1)/d} + exp(x[i])",
             "latex": r"for i \in [d] : y[i] \gets x[i] \cdot b^{-2(i-1)/d} + \exp(x[i])"}
    texts = []
    for style, line in lines.items():
        src = ANGLES.replace(ANGLES.splitlines()[4], f"  1 {line}")
        graph = elaborate(load_program(write(tmp_path, src, f"{style}.alg")), None, {"d": 4, "b": 10.0})
        texts.append(format_graph(graph, with_locations=False))
    assert texts[0] == texts[1] == texts[2]
    assert "= pow " in texts[0] and "= exp " in texts[0]


def test_checking_without_a_config(tmp_path: Path) -> None:
    for src in (ANGLES, POSITIONS, SLOPES):
        check(write(tmp_path, src))


@pytest.mark.parametrize("line,hyper,col,message", [
    ("1 for i ∈ [d] : y[i] ← x[i] + (−2)^{1/i}", {"b": 2.0}, 34, "must be positive, and it is -2"),
    ("1 for i ∈ [d] : y[i] ← x[i] + b^{1/2}", {"b": -3.0}, 33, "must be positive, and b is -3"),
    ("1 for i ∈ [d] : y[i] ← x[i] + 0^{i/2}", {"b": 2.0}, 33, "must be positive, and it is 0"),
])
def test_a_base_that_is_not_positive_is_a_diagnostic(tmp_path: Path, line: str, hyper: dict, col: int,
                                                      message: str) -> None:
    src = ANGLES.replace(ANGLES.splitlines()[4], f"  {line}")
    with pytest.raises(CompileError) as info:
        compile_source(tmp_path, src, d=4, **hyper)
    (err,) = info.value.errors
    assert message in str(err) and (err.pos.line, err.pos.col) == (5, col), str(err)


def test_a_negative_base_with_a_whole_exponent_is_a_power(tmp_path: Path) -> None:
    src = ANGLES.replace(ANGLES.splitlines()[4], "  1 for i ∈ [d] : y[i] ← x[i] + (−2)^{(i + 1) mod 3 − 1}")
    model = compile_source(tmp_path, src, d=5, b=1.0)
    x = np.zeros((1, 5), np.float32)
    i = np.arange(1, 6)
    np.testing.assert_allclose(run_both(model, x=x)["y"], (-2.0) ** ((i + 1) % 3 - 1)[None], rtol=1e-6)


def test_large_whole_powers_and_powers_of_sizes(tmp_path: Path) -> None:
    src = ANGLES.replace(ANGLES.splitlines()[4], "  1 for i ∈ [d] : y[i] ← x[i]^{12} + d^{2} + (x[i])^{99999} + 2^{99999}")
    model = compile_source(tmp_path, src, d=3, b=1.0)
    x = np.array([[0.5, -1.0, 1.0]], np.float32)
    with np.errstate(over="ignore"):
        want = x.astype(np.float64) ** 12 + 9 + x.astype(np.float64) ** 99999 + np.inf
    np.testing.assert_allclose(run_both(model, x=x)["y"], want, rtol=1e-6)
    # a power past a few factors is one POW, not a chain of products
    assert len(model.graph.nodes()) < 40
