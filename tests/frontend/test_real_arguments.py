"""Real arguments in calls: a real hyperparameter (`b ∈ ℝ`) passed after `|` as masks are (`F(X | b)`), by
keyword with a per-call value (`m = 2^{−8h/H}`), inherited by name, or set by a .toml config or -D; each
checked against numpy on the interpreter and ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pseudoformer.base.errors import CompileError
from pseudoformer.cli import main
from pseudoformer.model import check, load
from tests.frontend.notation_run import run_both, write

RNG = np.random.default_rng(8)

SCALE = """Algorithm: y ← Scale(x | m)
  Input: x ∈ ℝ^{d}
  Output: y ∈ ℝ^{d}
  Hyperparameters: m ∈ (0, ∞)
  1 for i ∈ [d] : y[i] ← x[i] · m^{−(i−1)/d}
  2 return y

"""

HEADS = SCALE + """Algorithm: z ← Heads(x)
  Input: x ∈ ℝ^{d}
  Output: z ∈ ℝ^{d}
  Hyperparameters: d, H ∈ ℕ, b ∈ ℝ
  1 z ← Scale(x | b)
  2 For h ∈ [H]:
  3   z ← z + Scale(x | m = 2^{−8h/H})
  4 return z = z + Scale(x | 3.5) + Scale(x | m = x[1]² + 1)
"""


def _scale(x: np.ndarray, m: float | np.ndarray) -> np.ndarray:
    d = x.shape[-1]
    return x * np.asarray(m)[..., None] ** (-np.arange(d) / d)


def _heads(x: np.ndarray, b: float, H: int) -> np.ndarray:
    z = _scale(x, b) + sum(_scale(x, 2.0 ** (-8 * h / H)) for h in range(1, H + 1))
    return z + _scale(x, 3.5) + _scale(x, x[:, 0] ** 2 + 1)


def test_reals_passed_by_position_by_keyword_and_per_call(tmp_path: Path) -> None:
    model = load(write(tmp_path, HEADS), entry="Heads", defines=["d=4", "H=3", "b=10000.0"])
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(run_both(model, x=x)["z"], _heads(x, 10000.0, 3), rtol=1e-5, atol=1e-6)


def test_a_real_from_a_toml_config(tmp_path: Path) -> None:
    path = write(tmp_path, HEADS, "heads.alg")
    (tmp_path / "heads.toml").write_text('entry = "Heads"\n\n[hyperparameters]\nd = 4\nH = 2\nb = 500.0\n',
                                         encoding="utf-8")
    model = load(path)
    x = RNG.standard_normal((1, 4)).astype(np.float32)
    np.testing.assert_allclose(run_both(model, x=x)["z"], _heads(x, 500.0, 2), rtol=1e-5, atol=1e-6)
    assert model.graph.meta["hyperparameters"]["b"] == 500.0


INHERITED = SCALE + """Algorithm: z ← Outer(x)
  Input: x ∈ ℝ^{d}
  Output: z ∈ ℝ^{d}
  Hyperparameters: d ∈ ℕ, m ∈ ℝ
  1 return z = Scale(x)
"""


def test_a_callee_inherits_a_real_by_name(tmp_path: Path) -> None:
    model = load(write(tmp_path, INHERITED), entry="Outer", defines=["d=3", "m=4.0"])
    x = RNG.standard_normal((1, 3)).astype(np.float32)
    np.testing.assert_allclose(run_both(model, x=x)["z"], _scale(x, 4.0), rtol=1e-5)


ALIBI = """Algorithm: S ← Bias(X | m)
  Input: X ∈ ℝ^{d × ℓ}
  Output: S ∈ ℝ^{ℓ × ℓ}
  Hyperparameters: m ∈ ℝ
  1 S ← Xᵀ X
  2 ∀t, t' : S[t, t'] ← S[t, t'] − m · abs(t' − t)
  3 return S

Algorithm: S ← Heads(X)
  Input: X ∈ ℝ^{d × ℓ}
  Output: S ∈ ℝ^{ℓ × ℓ}
  Hyperparameters: d, H ∈ ℕ
  1 S ← 0 Bias(X | m = 0)
  2 For h ∈ [H]:
  3   S ← S + Bias(X | m = 2^{−8h/H})
  4 return S
"""


def test_alibi_slopes_passed_per_head(tmp_path: Path) -> None:
    model = load(write(tmp_path, ALIBI), entry="Heads", defines=["d=2", "H=4"])
    X = RNG.standard_normal((1, 5, 2)).astype(np.float32)
    got = run_both(model, X=X)["S"][0]
    t = np.arange(1, 6)
    dist = np.abs(t[None, :] - t[:, None])
    want = sum(X[0] @ X[0].T - 2.0 ** (-8 * h / 4) * dist for h in range(1, 5))
    np.testing.assert_allclose(got, want.T, rtol=1e-5, atol=1e-5)


def test_checking_without_a_config(tmp_path: Path) -> None:
    for src, entry in ((HEADS, "Heads"), (INHERITED, "Outer"), (ALIBI, "Heads")):
        check(write(tmp_path, src), entry=entry)


def test_d_sets_a_real_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, HEADS)
    assert main(["check", str(path), "--entry", "Heads", "-D", "d=2", "-D", "H=1", "-D", "b=2.5"]) == 0
    assert main(["check", str(path), "--entry", "Heads", "-D", "d=2", "-D", "H=1", "-D", "b=x"]) == 1
    assert "-D b='x': the value must be a number" in capsys.readouterr().err


@pytest.mark.parametrize("call,col,message", [
    ("Scale(x | m = x)", 30, "Scale's m is a real number; x is ℝ^{3}"),
    ("Scale(x | m = −1)", 30, "Scale's m is declared in (0, ∞), and this is -1"),
    ("Scale(x | m[t] = 2)", 26, "m is a real number of Scale; pass it as m = …, without indices"),
    ("Scale(x)", 16, "Scale needs its real hyperparameter m"),
])
def test_misuse_is_one_positioned_diagnostic(tmp_path: Path, call: str, col: int, message: str) -> None:
    src = SCALE + ("Algorithm: z ← Outer(x)\n  Input: x ∈ ℝ^{d}\n  Output: z ∈ ℝ^{d}\n  Hyperparameters: d ∈ ℕ\n"
                   f"  1 return z = {call}\n")
    with pytest.raises(CompileError) as info:
        load(write(tmp_path, src), entry="Outer", defines=["d=3"])
    (err,) = info.value.errors
    assert message in str(err) and (err.pos.line, err.pos.col) == (12, col), str(err)


ROPE = """Algorithm: Y ← RoPE(X | b)
  Input: X ∈ ℝ^{d × ℓ}
  Output: Y ∈ ℝ^{d × ℓ}
  Hyperparameters: b ∈ ℝ
  1 for i ∈ [d/2], t ∈ [ℓ] : θ[i, t] ← (t − 1) · b^{−2(i−1)/d}
  2 for i ∈ [d/2], t ∈ [ℓ] : Y[i, t] ← X[i, t] cos(θ[i, t]) − X[i + d/2, t] sin(θ[i, t])
  3 for i ∈ [d/2], t ∈ [ℓ] : Y[i + d/2, t] ← X[i + d/2, t] cos(θ[i, t]) + X[i, t] sin(θ[i, t])
  4 return Y

Algorithm: Y ← Rotated(X)
  Input: X ∈ ℝ^{d × ℓ}
  Output: Y ∈ ℝ^{d × ℓ}
  Hyperparameters: d ∈ ℕ, β ∈ ℝ
  1 return Y = RoPE(X | β) + RoPE(X | b = 100)
"""


def _rope(X: np.ndarray, b: float) -> np.ndarray:
    """Rotate-half RoPE of one example, X: d × ℓ."""
    d, ell = X.shape
    i, t = np.arange(1, d // 2 + 1)[:, None], np.arange(1, ell + 1)[None]
    theta = (t - 1) * b ** (-2 * (i - 1) / d)
    c, s = np.cos(theta), np.sin(theta)
    return np.concatenate([X[:d // 2] * c - X[d // 2:] * s, X[d // 2:] * c + X[:d // 2] * s])


@pytest.mark.parametrize("ell", [1, 6])
def test_the_llama_sketch_rope_with_its_base_passed(tmp_path: Path, ell: int) -> None:
    """RoPE as /work/issues/llama_notation.md writes it: the rotary base b is a real argument."""
    model = load(write(tmp_path, ROPE), entry="Rotated", defines=["d=8", "beta=10000.0"])
    X = RNG.standard_normal((2, ell, 8)).astype(np.float32)
    got = run_both(model, X=X)["Y"]
    for b in range(2):
        want = _rope(X[b].T, 10000.0) + _rope(X[b].T, 100.0)
        np.testing.assert_allclose(got[b], want.T, rtol=1e-5, atol=1e-5)


AFFINE = """Algorithm: y ← Affine(x | Mask, p, m)
  Input: x ∈ ℝ^{d}
  Output: y ∈ ℝ^{d}
  Hyperparameters: Mask ∈ {0,1}^{d × d}
  Hyperparameters: p, m ∈ ℝ
  1 for i ∈ [d] : y[i] ← x[i] · p + m
  2 return y

Algorithm: z ← Outer(x)
  Input: x ∈ ℝ^{d}
  Output: z ∈ ℝ^{d}
  Hyperparameters: d ∈ ℕ
  1 return z = CALL
"""


@pytest.mark.parametrize("call", ["Affine(x | Mask ≡ 1, 2, 5)", "Affine(x | 1, p = 2, 5)", "Affine(x | 1, 2, m = 5)",
                                  "Affine(x | m = 5, Mask ≡ 1, 2)"])
def test_positional_arguments_fill_the_slots_no_keyword_names(tmp_path: Path, call: str) -> None:
    """A keyword takes its own slot: before, `Affine(x | Mask ≡ 1, 2, 5)` bound Mask ← 2 and p ← 5 by position."""
    model = load(write(tmp_path, AFFINE.replace("CALL", call)), entry="Outer", defines=["d=3"])
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(run_both(model, x=x)["z"], x * 2 + 5, rtol=1e-6, atol=1e-6)


def test_a_positional_argument_with_no_slot_left_is_located(tmp_path: Path) -> None:
    with pytest.raises(CompileError) as info:
        load(write(tmp_path, AFFINE.replace("CALL", "Affine(x | Mask ≡ 1, p = 2, 5, 7)")), entry="Outer",
             defines=["d=3"])
    (err,) = info.value.errors
    assert "this one has no place" in str(err) and (err.pos.line, err.pos.col) == (13, 47), str(err)
