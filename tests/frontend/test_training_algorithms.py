"""Training algorithms (the paper's Algorithms 11–13, issue 12 item 10): `∇`, `θ̂` and `η` are read,
and a training algorithm gets one diagnostic at its gradient step until training is compiled."""

from __future__ import annotations

from pathlib import Path

import pytest

from pseudoformer.cli import main
from pseudoformer.errors import CompileError, Pos
from pseudoformer.frontend.errors import ShapeError, TrainingError
from pseudoformer.frontend.layout import Kind, Line
from pseudoformer.frontend.parser import parse_line
from pseudoformer.model import check

HERE = Path(__file__).parent / "training"
STEP = "θ ← θ − η · ∇loss(θ)"
SPELLINGS = {"unicode": STEP, "latex": r"\theta \gets \theta - \eta \cdot \nabla loss(\theta)",
             "ascii": "theta <- theta - eta * nabla loss(theta)"}


@pytest.mark.parametrize(("name", "line", "col"), [("edtraining", 15, 21), ("etraining", 19, 22),
                                                   ("dtraining", 15, 21)])
def test_the_papers_training_algorithms_get_one_diagnostic(name: str, line: int, col: int) -> None:
    with pytest.raises(CompileError) as e:
        check(HERE / f"{name}.alg")
    [err] = e.value.errors
    assert isinstance(err, TrainingError) and err.message.startswith("training algorithms are not supported yet")
    assert (err.pos.line, err.pos.col) == (line, col) and err.source_line.strip().endswith("∇loss(θ)")


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_spelling_of_the_gradient_step_is_the_same_refusal(tmp_path: Path, spelling: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    src = (HERE / "dtraining.alg").read_text(encoding="utf-8").replace(STEP, SPELLINGS[spelling])
    (tmp_path / "paper").mkdir()
    path = tmp_path / "t.alg"
    path.write_text(src, encoding="utf-8")
    assert main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "training algorithms are not supported yet" in err
    assert f"{path}:15:" in err and "Traceback" not in err


@pytest.mark.parametrize("text", SPELLINGS.values())
def test_the_gradient_parses_as_an_expression(text: str) -> None:
    tree = parse_line(Line(Kind.BODY, text, Pos("t.alg", 1, 1), 0), "t.alg")
    assert "grad(" in repr(tree) and "call(" in repr(tree)


FORWARD_AND_TRAINING = """Algorithm: y ← f(x | W)
  Input: x ∈ ℝ^{d}
  Output: y ∈ ℝ^{e}
  Parameters: W ∈ ℝ^{e × d}
  1 return y = x W

Algorithm: θ̂ ← Train(x, θ)
  Input: x, data.
  Hyperparameters: η ∈ (0, ∞)
  1 θ ← θ − η · ∇loss(θ)
  2 return θ̂ = θ
"""


def test_the_other_algorithms_of_the_file_are_still_checked(tmp_path: Path) -> None:
    path = tmp_path / "both.alg"
    path.write_text(FORWARD_AND_TRAINING, encoding="utf-8")
    with pytest.raises(CompileError) as e:
        check(path)
    kinds = sorted(type(x).__name__ for x in e.value.errors)
    assert kinds == [ShapeError.__name__, TrainingError.__name__]  # f's x W is wrong, Train is refused
    path.write_text(FORWARD_AND_TRAINING.replace("return y = x W", "return y = W x"), encoding="utf-8")
    with pytest.raises(CompileError) as e:
        check(path)
    assert [type(x) for x in e.value.errors] == [TrainingError]


def test_a_name_that_contains_nabla_is_a_name(tmp_path: Path) -> None:
    path = tmp_path / "n.alg"
    path.write_text("Algorithm: y ← f(x)\n  Input: x ∈ ℝ^{d}\n  Output: y ∈ ℝ^{d}\n  1 nablax ← x\n"
                    "  2 return y = nablax\n", encoding="utf-8")
    assert check(path) == ["f"]
