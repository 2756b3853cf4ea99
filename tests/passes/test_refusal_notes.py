"""`inspect --refusals` counts every head a fusion refused, and a refusal inside a shared algorithm (one a
`use` brings in) is placed at the user's call of it, naming the line inside (issue 27: "1 refused fusion"
for 4 heads, pointing into variants.alg)."""

from __future__ import annotations

from pathlib import Path

from pseudoformer.cli import main
from pseudoformer.model import load
from pseudoformer.optimize import refusals
from tests.passes.test_softcap import CAPPED

USER = """use Block from "shared.alg"

Algorithm: Y ← Model(X | θ)
  Input: X ∈ ℝ^{d_x × ℓ}
  Output: Y ∈ ℝ^{d_x × ℓ}
  Hyperparameters: L ∈ ℕ
  Parameters: θ consisting of:
    For l ∈ [L]:
      W_l : Block
  1 for l = 1, 2, …, L do
  2   X ← X + Block(X | W_l)
  3 end
  4 return Y = X
"""


def _files(tmp_path: Path) -> Path:
    (tmp_path / "shared.alg").write_text(CAPPED.replace("CAPPED", "c tanh(Kᵀ Q / c) / √d_attn"), encoding="utf-8")
    user = tmp_path / "model.alg"
    user.write_text(USER, encoding="utf-8")
    return user


def test_each_refused_head_counts_and_the_note_is_at_the_users_line(tmp_path: Path) -> None:
    model = load(_files(tmp_path), defines=["d_x=8", "d_attn=4", "d_mid=4", "H=2", "c=2.0", "L=3"])
    (note,) = refusals(model.graph, 2)
    assert note.count == 2 * 3  # two heads in each of three layers
    assert (Path(note.pos.file).name, note.pos.line, note.pos.col) == ("model.alg", 11, 15)
    assert note.message.startswith("attention refused 6 times: the soft-capped scores are scaled after the cap")
    assert note.message.endswith("(in shared.alg:13)")  # the head's `V · softmax(S)` line


def test_the_command_line_totals_the_heads(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    path = _files(tmp_path)
    assert main(["inspect", str(path), "--refusals", "-D", "d_x=8", "-D", "d_attn=4", "-D", "d_mid=4", "-D", "H=2",
                 "-D", "c=2.0", "-D", "L=3"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("6 refused fusions") and "model.alg:11:15: note: attention refused 6 times" in out
