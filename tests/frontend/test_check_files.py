"""`check` on valid files (issue 12, item 1): a helper algorithm is checked symbolically and in the
context of the entries that call it, never elaborated as an entry with the config's values; size
polynomials compare in normal form; a derived quotient of symbols waits for values; one message per
mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from pseudoformer.base.errors import CompileError
from pseudoformer.cli import main
from pseudoformer.model import check

MODELS = Path(__file__).resolve().parents[2] / "models"
CONFIG = """entry = "DTransformer"
[hyperparameters]
L = 2
H = 2
d_e = 8
d_mlp = 16
d_attn = 4
d_mid = 4
ell_max = 16
N_V = 10
"""


def _decoder_in_one_file(tmp_path: Path, *, edit: tuple[str, str] | None = None) -> Path:
    """The paper's primitives (Algorithms 1–7, whose sizes d_in, d_x, … the config does not set) and
    Algorithm 10 in one file, with a config beside it."""
    primitives = (MODELS / "paper" / "primitives.alg").read_text(encoding="utf-8")
    decoder = (MODELS / "paper" / "dtransformer.alg").read_text(encoding="utf-8").replace('use "primitives.alg"', "")
    text = primitives + "\n" + decoder
    if edit is not None:
        assert edit[0] in text
        text = text.replace(edit[0], edit[1])
    path = tmp_path / "decoder.alg"
    path.write_text(text, encoding="utf-8")
    (tmp_path / "decoder.toml").write_text(CONFIG, encoding="utf-8")
    return path


def test_helpers_beside_a_config_are_checked_symbolically(tmp_path: Path) -> None:
    path = _decoder_in_one_file(tmp_path)
    assert check(path) == ["TokenEmbedding", "PositionalEmbedding", "Algorithm 3", "Algorithm 4", "MHAttention",
                           "layer_norm", "Unembedding", "DTransformer"]


def test_a_mistake_in_a_helper_is_reported_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # MHAttention is checked on its own and again inside DTransformer's two layers: one message.
    path = _decoder_in_one_file(tmp_path, edit=("4 return Ṽ = W_o Y + b_o 1ᵀ", "4 return Ṽ = W_o Yᵀ + b_o 1ᵀ"))
    with pytest.raises(CompileError) as e:
        check(path)
    assert len(e.value.errors) == 1 and "sizes H·d_mid and ℓ_x differ" in str(e.value.errors[0])
    assert main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "decoder.alg:" in err and "^" in err


def test_the_config_entry_still_gets_every_value(tmp_path: Path) -> None:
    path = _decoder_in_one_file(tmp_path)
    (tmp_path / "decoder.toml").write_text(CONFIG.replace("N_V = 10\n", ""), encoding="utf-8")
    with pytest.raises(CompileError, match="N_V"):
        check(path)


HEADS = """Algorithm: Y ← head(X | 𝒲)
  Input: X ∈ ℝ^{d_x × ℓ}
  Output: Y ∈ ℝ^{d_mid × ℓ}
  Parameters: 𝒲 consisting of:
    W ∈ ℝ^{d_mid × d_x}
  1 return Y = W X

Algorithm: Y ← MH(X | θ)
  Input: X ∈ ℝ^{d × ℓ}
  Output: Y ∈ ℝ^{d × ℓ}
  Hyperparameters: H, d, d_mid ∈ ℕ
  Parameters: θ consisting of:
    For h ∈ [H]: W^h : head
    W_o ∈ ℝ^{d × SIZE}
  1 For h ∈ [H]:
  2   Yʰ ← head(X | W^h)
  3 Y ← [Y¹; Y²; …; Y^H]
  4 return Y = W_o Y
"""


@pytest.mark.parametrize("size", ["H d_mid", "d_mid H", "d_mid · H"])
def test_size_polynomials_compare_in_normal_form(tmp_path: Path, size: str) -> None:
    path = tmp_path / "heads.alg"
    path.write_text(HEADS.replace("SIZE", size), encoding="utf-8")
    assert check(path) == ["head", "MH"]
    assert check(path, defines=["H=3", "d=4", "d_mid=2"]) == ["head", "MH"]


GROUPS = """Algorithm: Y ← picks(X | W)
  Input: X ∈ ℝ^{d × ℓ}
  Output: Y ∈ ℝ^{H d × ℓ}
  Hyperparameters: H, H_kv, d ∈ ℕ
  Hyperparameters: G = H / H_kv, the query heads of a group.
  Parameters: W consisting of:
    For g ∈ [H_kv]: W^g_k ∈ ℝ^{d × d}
  1 For h ∈ [H]:
  2   Yʰ ← W_k^{⌈h/G⌉} X
  3 Y ← [Y¹; Y²; …; Y^H]
  4 return Y
"""


def test_a_quotient_of_symbols_waits_for_values(tmp_path: Path) -> None:
    path = tmp_path / "groups.alg"
    path.write_text(GROUPS, encoding="utf-8")
    assert check(path) == ["picks"]
    assert check(path, defines=["H=6", "H_kv=2", "d=2"]) == ["picks"]
    with pytest.raises(CompileError, match="4 is not divisible by 3") as e:
        check(path, defines=["H=4", "H_kv=3", "d=2"])
    assert e.value.errors[0].pos.line == 5
