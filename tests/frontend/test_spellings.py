r"""Every symbol has a Unicode, an ASCII and a LaTeX spelling; they must mean exactly the same program.

spellings/NAME.{unicode,ascii,latex}.alg are one program each, written three ways; together they use
every spelling of the grammar (←, ∈, ℝ, ×, ᵀ, ⊙, √, Σ, ∀, ¬, ∧, ∨, ≤, ≥, ≠, −, ∞, …, ≡, ≅, Δ, ·, ²,
Greek letters, accents, primes, superscripts, ⟦⟧, {0,1}, remarks, and LaTeX's \exp(…),
\mathrm{softmax}(…) and \operatorname{…}(…) calls). Their IR, printed without source locations, must
be byte-identical.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pseudoformer.base.errors import CompileError
from pseudoformer.frontend.entry import elaborate
from pseudoformer.frontend.errors import ShapeError
from pseudoformer.frontend.modules import load_program
from pseudoformer.ir.printer import format_graph
from pseudoformer.ir.verify import verify

SPELLINGS = Path(__file__).parent / "spellings"
STYLES = ("unicode", "ascii", "latex")
PROGRAMS = {
    "block": {"d_e": 8, "d_attn": 4, "N_V": 11, "eps": 1e-5},
    "multihead": {"L": 2, "H": 2, "d_e": 8, "d_attn": 4, "d_mid": 4, "N_V": 11},
    "embed": {"d_e": 8, "N_V": 11, "ell_max": 16},
}


def ir_text(path: Path, hyperparameters: dict[str, int | float]) -> str:
    graph = elaborate(load_program(path), None, hyperparameters)
    verify(graph)
    return format_graph(graph, with_locations=False)


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_three_spellings_give_the_same_ir(program: str) -> None:
    texts = {s: ir_text(SPELLINGS / f"{program}.{s}.alg", PROGRAMS[program]) for s in STYLES}
    assert texts["unicode"].count("\n") > 20  # a real program, not an empty graph
    assert texts["ascii"] == texts["unicode"]
    assert texts["latex"] == texts["unicode"]


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_three_spellings_check_without_a_config(program: str) -> None:
    """Symbolic sizes print as their ASCII names (ℓ_max → ell_max), so these agree too."""
    texts = {s: format_graph(elaborate(load_program(SPELLINGS / f"{program}.{s}.alg"), None, {}, symbolic=True),
                             with_locations=False) for s in STYLES}
    assert texts["ascii"] == texts["unicode"] == texts["latex"]


@pytest.mark.parametrize("style", STYLES)
def test_a_remark_is_checked_in_every_spelling(style: str, tmp_path: Path) -> None:
    """`[[S in …]]` and `[\\![S \\in …]\\!]` are remarks like `[[S ∈ …]]`, not Iverson brackets."""
    source = (SPELLINGS / f"block.{style}.alg").read_text(encoding="utf-8")
    wrong = {"unicode": ("[[S ∈ ℝ^{ℓ × ℓ}]]", "[[S ∈ ℝ^{ℓ × d_e}]]"),
             "ascii": ("[[S in R^{ell * ell}]]", "[[S in R^{ell * d_e}]]"),
             "latex": ("[[S \\in \\mathbb{R}^{\\ell \\times \\ell}]]", "[\\![S \\in \\mathbb{R}^{\\ell \\times d_e}]\\!]")}
    old, new = wrong[style]
    assert old in source
    path = tmp_path / "remark.alg"
    path.write_text(source.replace(old, new), encoding="utf-8")
    with pytest.raises(CompileError) as info:
        elaborate(load_program(path), None, PROGRAMS["block"])
    (err,) = info.value.errors
    assert isinstance(err, ShapeError) and "the remark [[S ∈ …]]" in err.message
    assert err.pos is not None and err.pos.line == 8


def test_ascii_sum_is_a_sum_only_before_its_subscript(tmp_path: Path) -> None:
    """`sum_{i=1}^{n}` and `sum_i` are sums; `sum_sq` is an ordinary name."""
    path = tmp_path / "sums.alg"
    path.write_text("Algorithm: y <- F(e)\n"
                    "  Input: e in R^{d}\n"
                    "  Output: y in R\n"
                    "  1 sum_sq <- sum_{i=1}^{d} e[i]^2\n"
                    "  2 return y = sum_sq / d + sum_i e[i]\n", encoding="utf-8")
    unicode = tmp_path / "sums_u.alg"
    unicode.write_text("Algorithm: y ← F(e)\n"
                       "  Input: e ∈ ℝ^{d}\n"
                       "  Output: y ∈ ℝ\n"
                       "  1 sum_sq ← Σ_{i=1}^{d} e[i]²\n"
                       "  2 return y = sum_sq / d + Σ_i e[i]\n", encoding="utf-8")
    assert ir_text(path, {"d": 5}) == ir_text(unicode, {"d": 5})
