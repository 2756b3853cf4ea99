"""Integer arithmetic in the notation: `a mod b`, ⌊a/b⌋ and ⌈a/b⌉ in values, masks, sum bounds, loop bounds
and the scripts that pick family members; each checked against numpy on the interpreter and ONNX Runtime."""

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

RNG = np.random.default_rng(12)

VALUES = """Algorithm: y ← Ints(x)
  Input: x ∈ ℝ^{ℓ}
  Output: y ∈ ℝ^{ℓ}
  Hyperparameters: s ∈ ℕ
  1 for t ∈ [ℓ] : y[t] ← x[t] + ⌊t/2⌋ + 10⌈t/3⌉ + 100((t − 5) mod s) + 1000 floor(ℓ/2) + 10⁴ (ℓ mod 3)
  2 return y
"""


@pytest.mark.parametrize("ell", [1, 7, 12])
def test_mod_floor_and_ceil_of_positions_and_sizes(tmp_path: Path, ell: int) -> None:
    model = compile_source(tmp_path, VALUES.replace("10⁴", "10000"), s=3)
    x = RNG.standard_normal((2, ell)).astype(np.float32)
    t = np.arange(1, ell + 1)
    # numpy's % is the floored remainder: (1 − 5) mod 3 = 2, as in the paper's convention
    want = x + t // 2 + 10 * -(-t // 3) + 100 * ((t - 5) % 3) + 1000 * (ell // 2) + 10000 * (ell % 3)
    np.testing.assert_allclose(run_both(model, x=x)["y"], want, rtol=1e-6)


def test_the_remainder_is_computed_over_the_positions_not_unrolled(tmp_path: Path) -> None:
    model = compile_source(tmp_path, VALUES.replace("10⁴", "10000"), s=3)
    ops = [n.op for n in model.graph.nodes()]
    # (t − 5) mod s, ⌊t/2⌋ and ⌈t/3⌉ over all t at once; ℓ mod 3 and floor(ℓ/2) are size arithmetic
    assert ops.count(Op.MOD) == 1 and ops.count(Op.FLOOR) == 1 and ops.count(Op.CEIL) == 1


STRIDED = """Algorithm: S ← Strided(X)
  Input: X ∈ ℝ^{d × ℓ}
  Output: S ∈ ℝ^{ℓ × ℓ}
  Hyperparameters: d, s ∈ ℕ
  1 S ← Xᵀ X
  2 ∀t, t' : if (t' − t) mod s ≠ 1 then S[t, t'] ← 0
  3 return S
"""


def test_a_strided_condition_in_an_if(tmp_path: Path) -> None:
    model = compile_source(tmp_path, STRIDED, d=3, s=4)
    X = RNG.standard_normal((2, 9, 3)).astype(np.float32)  # [batch, ℓ, d]
    got = run_both(model, X=X)["S"]
    t = np.arange(1, 10)
    keep = (t[None, :] - t[:, None]) % 4 == 1  # [t, t′]
    for b in range(2):
        S = X[b] @ X[b].T
        # the interface gives matrices transposed, as [t′, t]
        np.testing.assert_allclose(got[b], np.where(keep, S, 0).T, rtol=1e-5, atol=1e-6)


MASKED = """Algorithm: S ← Masked(X | Mask)
  Input: X ∈ ℝ^{d × ℓ}
  Output: S ∈ ℝ^{ℓ × ℓ}
  Hyperparameters: d ∈ ℕ, Mask ∈ {0,1}^{ℓ × ℓ}
  1 S ← Xᵀ X
  2 ∀t, t' : if ¬Mask[t, t'] then S[t, t'] ← 0
  3 return S

Algorithm: S ← Sparse(X)
  Input: X ∈ ℝ^{d × ℓ}
  Output: S ∈ ℝ^{ℓ × ℓ}
  Hyperparameters: d, s ∈ ℕ
  1 return S = Masked(X | Mask[t, t'] = [[t ≤ t' ∧ (t' − t) mod s = 0]])
"""


def test_a_strided_mask_defined_with_mod_in_an_iverson_bracket(tmp_path: Path) -> None:
    model = load_sparse(tmp_path)
    X = RNG.standard_normal((1, 10, 2)).astype(np.float32)
    got = run_both(model, X=X)["S"][0]
    t = np.arange(1, 11)
    keep = (t[:, None] <= t[None, :]) & ((t[None, :] - t[:, None]) % 3 == 0)
    np.testing.assert_allclose(got, np.where(keep, X[0] @ X[0].T, 0).T, rtol=1e-5, atol=1e-6)


def load_sparse(tmp_path: Path):
    from pseudoformer.model import load

    return load(write(tmp_path, MASKED), entry="Sparse", defines=["d=2", "s=3"])


SUMS = """Algorithm: y ← Sums(x)
  Input: x ∈ ℝ^{ℓ}
  Output: y ∈ ℝ
  Hyperparameters: n ∈ ℕ
  1 y ← Σ_{t=1}^{ℓ−1} x[t] + Σ_{i=1}^{⌈n/2⌉} i + Σ_{i=1}^{n mod 4} 100 + Σ_{i=1}^{⌊n/2⌋ − 1} 1000
  2 y ← y + 10000 · Σ_{t=1}^{⌈ℓ/2⌉} x[t]
  3 return y
"""


@pytest.mark.parametrize("ell", [1, 2, 7])
def test_sum_bounds_that_are_expressions_of_sizes(tmp_path: Path, ell: int) -> None:
    model = compile_source(tmp_path, SUMS, n=7)
    x = RNG.standard_normal((3, ell)).astype(np.float32)
    want = x[:, :-1].sum(axis=1) + (1 + 2 + 3 + 4) + 300 + 2000  # ⌈7/2⌉ = 4, 7 mod 4 = 3, ⌊7/2⌋ − 1 = 2
    want += 10000 * x[:, :(ell + 1) // 2].sum(axis=1)  # ℓ is known only when the model runs
    np.testing.assert_allclose(run_both(model, x=x)["y"], want, rtol=1e-5)


FAMILY = """Algorithm: z ← Grouped(x)
  Input: x ∈ ℝ^{d}
  Output: z ∈ ℝ^{d}
  Hyperparameters: d, H, G ∈ ℕ
  1 For g ∈ [⌈H/G⌉]:
  2   Y^g ← g x
  3 z ← 0 x
  4 For h ∈ [H]:
  5   z ← z + 10^{h − 1} Y^{⌈h/G⌉}
  6 return z
"""


def test_a_script_computed_from_a_loop_variable_picks_the_member(tmp_path: Path) -> None:
    model = compile_source(tmp_path, FAMILY.replace("10^{h − 1}", "(h mod 10)"), d=2, H=5, G=2)
    x = np.ones((1, 2), np.float32)
    # heads 1..5 read groups ⌈h/2⌉ = 1, 1, 2, 2, 3
    want = sum((h % 10) * -(-h // 2) for h in range(1, 6))
    np.testing.assert_allclose(run_both(model, x=x)["z"], np.full((1, 2), want), rtol=1e-6)


def test_three_spellings_of_the_integer_operators_agree(tmp_path: Path) -> None:
    body = "y[t] ← ⌊t/2⌋ + ⌈ℓ/3⌉ + (t − 5) mod s"
    spellings = {"unicode": body,
                 "ascii": "y[t] <- floor(t/2) + ceil(ell/3) + (t - 5) mod s",
                 "latex": r"y[t] \gets \lfloor t/2 \rfloor + \lceil \ell/3 \rceil + (t - 5) \bmod s"}
    texts = []
    for style, line in spellings.items():
        src = VALUES.replace(VALUES.splitlines()[4], f"  1 for t ∈ [ℓ] : {line}")
        graph = elaborate(load_program(write(tmp_path, src, f"{style}.alg")), None, {"s": 3, "ell": 5})
        texts.append(format_graph(graph, with_locations=False))
    assert texts[0] == texts[1] == texts[2]
    assert "= mod " in texts[0] and "= floor " in texts[0] and texts[0].count("\n") > 10


def test_checking_without_a_config_keeps_sizes_symbolic(tmp_path: Path) -> None:
    for src in (VALUES.replace("10⁴", "10000"), SUMS, STRIDED):
        check(write(tmp_path, src))  # no exception: ⌈n/2⌉ and ℓ − 1 need no values to be checked


@pytest.mark.parametrize("line,message", [
    ("y[t] ← t mod (s − s)", "mod 0 is undefined"),
    ("y[t] ← x[t] + Σ_{i=1}^{t mod 2} i", "upper bound changes with the positions, so i takes its range"),
    ("y[t] ← x[t] + Σ_{i=1}^{s − 5} i", "its upper bound must be at least 0"),
    ("y[t] ← x[t] + ⌊s/(s − 3)⌋", "divides by 0"),
])
def test_misuse_is_one_positioned_diagnostic(tmp_path: Path, line: str, message: str) -> None:
    src = VALUES.replace(VALUES.splitlines()[4], f"  1 for t ∈ [ℓ] : {line}")
    with pytest.raises(CompileError) as info:
        compile_source(tmp_path, src, s=3)
    (err,) = info.value.errors
    assert message in str(err) and err.pos.line == 5


INDICES = """Algorithm: y ← Mid(x)
  Input: x ∈ ℝ^{ℓ}
  Output: y ∈ ℝ
  Hyperparameters: n ∈ ℕ
  1 return y = x[⌈ℓ/2⌉] + 10 x[n mod 3 + 1] + 100 x[ℓ − ⌊ℓ/3⌋]
"""


@pytest.mark.parametrize("ell", [2, 5, 7])
def test_integer_expressions_of_sizes_as_indices(tmp_path: Path, ell: int) -> None:
    model = compile_source(tmp_path, INDICES, n=4)
    x = RNG.standard_normal((2, ell)).astype(np.float32)
    # 1-based positions ⌈ℓ/2⌉, 4 mod 3 + 1 = 2 and ℓ − ⌊ℓ/3⌋, as 0-based columns
    want = x[:, (ell + 1) // 2 - 1] + 10 * x[:, 1] + 100 * x[:, ell - ell // 3 - 1]
    np.testing.assert_allclose(run_both(model, x=x)["y"], want, rtol=1e-5)


HALVES = """Algorithm: y ← Halves(x | W)
  Input: x ∈ ℝ^{d}
  Output: y ∈ ℝ^{ceil(d/2)}
  Hyperparameters: d ∈ ℕ
  Parameters: W ∈ ℝ^{\\lceil d/2 \\rceil × d}
  1 for i ∈ [⌈d/2⌉] : y[i] ← (W x)[i] + Σ_{j=1}^{⌊d/2⌋} j + i mod 2 + (d mod 2)
  2 return y
"""


@pytest.mark.parametrize("d", [4, 5])
def test_rounded_sizes_in_declarations(tmp_path: Path, d: int) -> None:
    model = compile_source(tmp_path, HALVES, d=d)
    assert model.weights["W"].shape == ((d + 1) // 2, d)
    x = RNG.standard_normal((2, d)).astype(np.float32)
    i = np.arange(1, (d + 1) // 2 + 1)
    want = x @ model.weights["W"].T + sum(range(1, d // 2 + 1)) + i % 2 + d % 2
    np.testing.assert_allclose(run_both(model, x=x)["y"], want, rtol=1e-5, atol=1e-5)


def test_rounded_sizes_check_without_a_config(tmp_path: Path) -> None:
    check(write(tmp_path, HALVES))  # ⌈d/2⌉ in the types and the map, in three spellings, is one size


def test_a_declaration_cannot_be_sized_by_a_run_time_rounding(tmp_path: Path) -> None:
    src = HALVES.replace("x ∈ ℝ^{d}", "x ∈ ℝ^{ℓ}").replace("ℝ^{\\lceil d/2 \\rceil × d}", "ℝ^{⌈ℓ/2⌉ × d}")
    with pytest.raises(CompileError) as info:
        compile_source(tmp_path, src, d=4)
    assert "is known only when the model runs, so it cannot size a declaration" in str(info.value.errors[0])
