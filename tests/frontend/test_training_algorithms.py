"""Training algorithms (the paper's Algorithms 11–13, issue 24 item 1): their lines parse as the paper
prints them, check, and reduce to a TrainingPlan and a loss graph; every departure from the shape
`pseudoformer train` runs is reported where it is, all at once. The loss graph's numbers are checked in
tests/frontend/test_training_loss.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from pseudoformer.base.errors import CompileError, Pos
from pseudoformer.cli import main
from pseudoformer.frontend.ast import Expr
from pseudoformer.frontend.entry import elaborate
from pseudoformer.frontend.errors import BadTypeError, HyperparameterError, ShapeError, TrainingError
from pseudoformer.frontend.layout import Kind, Line
from pseudoformer.frontend.modules import load_program
from pseudoformer.frontend.parser import parse_line
from pseudoformer.frontend.training import plan_training
from pseudoformer.frontend.training_plan import MaskingPlan
from pseudoformer.ir.printer import format_graph
from pseudoformer.model import check, check_report, load

HERE = Path(__file__).parent / "training"
NAMES = {"dtraining": "DTraining", "etraining": "ETraining", "edtraining": "EDTraining"}
STEP = "θ ← θ − η · ∇loss(θ)"


def parse(text: str) -> object:
    return parse_line(Line(Kind.BODY, text, Pos("t.alg", 1, 1), 0), "t.alg")


# ---------------------------------------------------------------------- the paper's text
@pytest.mark.parametrize(("name", "model", "data", "inputs", "loss"), [
    ("dtraining", "DTransformer", ("x",), ("x",), "next_token"),
    ("edtraining", "EDTransformer", ("z", "x"), ("z", "x"), "next_token"),
    ("etraining", "ETransformer", ("x",), ("x_tilde", "x", "T_tilde"), "masked"),
])
def test_the_papers_training_algorithms_check_and_give_their_plans(name: str, model: str, data: tuple, inputs: tuple,
                                                                   loss: str) -> None:
    report = check_report(HERE / f"{name}.alg")
    assert report.checked == [NAMES[name]]
    [plan] = report.training
    assert (plan.model, plan.data, plan.loss_inputs, plan.loss) == (model, data, inputs, loss)
    assert (plan.theta, plan.learning_rate, plan.epochs, plan.data_count, plan.optimizer) == \
        ("theta", "eta", "N_epochs", "N_data", "sgd")
    assert plan.model_output == "probabilities" and plan.loss_output == "loss"
    assert plan.masking == (MaskingPlan("p_mask", "mask_token", "x_tilde", "x", "T_tilde") if loss == "masked"
                            else None)
    assert report.summaries and report.summaries[0].startswith(plan.algorithm)


def test_the_paper_files_use_the_papers_models_by_their_packaged_paths() -> None:
    """`use "paper/dtransformer.alg"` resolves to the installed models/paper, and the loss graph's
    parameters are DTransformer's own, by its own names."""
    sizes = {"L": 1, "H": 2, "d_e": 8, "d_mlp": 8, "d_attn": 4, "d_mid": 4, "ell_max": 16, "N_V": 11}
    loss = elaborate(load_program(HERE / "dtraining.alg"), "DTraining", sizes)
    model = elaborate(load_program(Path(__file__).parents[2] / "models/paper/dtransformer.alg"), "DTransformer",
                      sizes)
    assert sorted(p.attrs["name"] for p in loss.params()) == sorted(p.attrs["name"] for p in model.params())
    assert [n.attrs["name"] for n in loss.inputs] == ["x"] and [n for n, _ in loss.outputs] == ["loss"]
    assert loss.outputs[0][1].type.rank == 1 and loss.meta["entry"] == "DTraining"


@pytest.mark.parametrize(("name", "model"), [("dtraining_gpt2", "GPT2"), ("dtraining_llama", "Llama"),
                                             ("etraining_bert", "BERT"), ("edtraining_bart", "BART")])
def test_training_over_the_real_architectures_checks_loads_and_compiles(name: str, model: str,
                                                                        tmp_path: Path) -> None:
    path = HERE / f"{name}.alg"
    assert check(path) == [NAMES[name.split("_")[0]]]
    m = load(path)
    assert m.training is not None and m.training.model == model and m.training.model_output == "logits"
    assert m.input_names == list(m.training.loss_inputs) and m.output_names == ["loss"]
    assert not any(k.startswith("theta.") for k in m.weights)
    out = tmp_path / f"{name}.onnx"
    assert main(["compile", str(path), "-o", str(out)]) == 0 and out.stat().st_size > 0


def test_the_three_spellings_of_a_training_algorithm_mean_the_same() -> None:
    for name in ("dtraining", "etraining"):
        graphs, plans = [], []
        for suffix in ("", ".ascii", ".latex"):
            prog = load_program(HERE / f"{name}{suffix}.alg")
            graphs.append(format_graph(elaborate(prog, None, {}, symbolic=True), with_locations=False))
            [alg] = prog.entries()[-1:]
            plan = plan_training(prog, alg)
            plans.append({k: v for k, v in vars(plan).items() if k != "pos"})
        assert graphs[0].count("\n") > 20
        assert graphs[1] == graphs[0] and graphs[2] == graphs[0]
        assert plans[1] == plans[0] and plans[2] == plans[0]


# ---------------------------------------------------------------------- log P[…] as the paper writes it
@pytest.mark.parametrize("text", ["y ← −log P[x[t + 1], t]", "y <- -log P[x[t + 1], t]",
                                  r"y \gets -\log P[x[t + 1], t]"])
def test_log_without_parentheses_is_the_log_of_the_indexed_entry(text: str) -> None:
    tree = parse(text)
    value = tree.children[-1]
    assert isinstance(value, Expr) and value.op == "neg"
    call = value.args[0]
    assert call.op == "call" and call.text == "log" and call.args[0][0].op == "index"
    assert call.args[0][0].args[0].text == "P"


def test_log_of_a_function_of_theta_indexed() -> None:
    tree = parse("loss(θ) = −Σ_{t=1}^{ℓ−1} log P(θ)[x_n[t+1], t]")
    assert tree.children[0].data == "fn_target"
    s = tree.children[-1].args[0]
    assert s.op == "sum" and s.args[-1].op == "call" and s.args[-1].text == "log"
    assert s.args[-1].args[0][0].op == "index" and s.args[-1].args[0][0].args[0].op == "call"


def test_log_p_and_log_of_p_give_one_graph(tmp_path: Path) -> None:
    src = ("Algorithm: y ← f(x)\n  Input: x ∈ V*\n  Output: y ∈ ℝ\n  Parameters: W ∈ ℝ^{N_V × N_V}\n"
           "  1 ℓ ← length(x)\n  2 for t ∈ [ℓ] : P[:, t] ← softmax(W[:, x[t]])\n  3 return y = −Σ_{t=1}^{ℓ−1} {LOSS}\n")
    texts = []
    for loss in ("log P[x[t+1], t]", "log(P[x[t+1], t])"):
        p = tmp_path / "f.alg"
        p.write_text(src.replace("{LOSS}", loss), encoding="utf-8")
        texts.append(format_graph(elaborate(load_program(p), None, {"N_V": 5}), with_locations=False))
    assert texts[0] == texts[1]


@pytest.mark.parametrize("text", [STEP, r"\theta \gets \theta - \eta \cdot \nabla loss(\theta)",
                                  "theta <- theta - eta * nabla loss(theta)"])
def test_the_gradient_parses_as_an_expression(text: str) -> None:
    assert "grad(" in repr(parse(text)) and "call(" in repr(parse(text))


def test_a_name_that_contains_nabla_is_a_name(tmp_path: Path) -> None:
    path = tmp_path / "n.alg"
    path.write_text("Algorithm: y ← f(x)\n  Input: x ∈ ℝ^{d}\n  Output: y ∈ ℝ^{d}\n  1 nablax ← x\n"
                    "  2 return y = nablax\n", encoding="utf-8")
    assert check(path) == ["f"]


def test_a_name_called_log_is_still_a_name_where_nothing_follows(tmp_path: Path) -> None:
    path = tmp_path / "n.alg"
    path.write_text("Algorithm: y ← f(x)\n  Input: x ∈ ℝ^{d}\n  Output: y ∈ ℝ^{d}\n  1 log ← x\n"
                    "  2 return y = log\n", encoding="utf-8")
    assert check(path) == ["f"]


# ---------------------------------------------------------------------- what is refused, and where
def write(tmp_path: Path, text: str, name: str = "t.alg") -> Path:
    (tmp_path / "paper").mkdir(exist_ok=True)
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def errors_of(path: Path) -> list[tuple[type, int, int, str]]:
    with pytest.raises(CompileError) as e:
        check(path)
    return [(type(x), x.pos.line, x.pos.col, x.message) for x in e.value.errors]


def test_every_departure_is_reported_where_it_is(tmp_path: Path) -> None:
    src = (HERE / "etraining.alg").read_text(encoding="utf-8")
    src = src.replace("for i = 1, 2, …, N_epochs do", "for i = 1, 2, …, N_steps do")  # 10: not declared
    src = src.replace("or 1 − p_mask", "or 1 − p")  # 14: the two probabilities do not add up to one
    src = src.replace("x̃_n[t] = mask_token}", "x_n[t] = mask_token}")  # 16: not the masked copy
    src = src.replace("θ ← θ − η · ∇loss(θ)", "θ ← θ − α · ∇loss(θ)")  # 19: α is not declared
    errs = errors_of(write(tmp_path, src))
    assert [(k, line) for k, line, _, _ in errs] == [(HyperparameterError, 10), (TrainingError, 14),
                                                      (TrainingError, 16), (HyperparameterError, 19)]
    assert "N_steps is not a hyperparameter" in errs[0][3] and "1 − p_mask" in errs[1][3]
    assert "x̃_n[t] = mask_token" in errs[2][3] and "η ∈ (0, ∞)" in errs[3][3]
    assert errs[3][2] == src.splitlines()[18].index("α") + 1


def test_a_model_of_logits_needs_softmax_and_the_cli_says_so_once(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    src = (HERE / "dtraining_gpt2.alg").read_text(encoding="utf-8").replace("softmax(GPT2(x_n | θ))",
                                                                             "GPT2(x_n | θ)")
    path = write(tmp_path, src)
    assert main(["check", str(path), "-D", "L=1"]) == 1
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "GPT2 returns logits" in err and "softmax(GPT2(x_n | θ))" in err
    assert f"{path}:14:" in err and "Traceback" not in err


@pytest.mark.parametrize(("old", "new", "line", "says"), [
    ("for n = 1, 2, …, N_data do", "for n = 1, 2, …, N_epochs do", 11, "runs to N_data"),
    ("P(θ) ← DTransformer(x_n | θ)", "P(θ) ← DTransformr(x_n | θ)", 13, "unknown algorithm DTransformr"),
    ("P(θ) ← DTransformer(x_n | θ)", "P(θ) ← DTransformer(x | θ)", 13, "reads the example"),
    ("return θ̂ = θ", "return θ̂ = η", 18, "returns the trained parameters"),
    (STEP, "θ ← θ − η · ∇P(θ)", 15, "the gradient is that of the loss"),
    (STEP, "θ ← θ + η · ∇loss(θ)", 15, "the update is a gradient step"),
    ("  5     loss(θ) = −Σ_{t=1}^{ℓ−1} log P(θ)[x_n[t+1], t]\n", "", 12, "no line loss(θ)"),
    ("loss(θ) = −Σ_{t=1}^{ℓ−1} log P(θ)[x_n[t+1], t]", "loss(θ) = −log P(θ)[x_n[2], :]", 14, "one number per example"),
])
def test_each_mistake_in_dtraining(tmp_path: Path, old: str, new: str, line: int, says: str) -> None:
    src = (HERE / "dtraining.alg").read_text(encoding="utf-8")
    assert old in src
    src = src.replace(old, new)
    if not new:  # a line removed: renumber the ones after it
        src = src.replace("  6     θ", "  5     θ").replace("  7   end", "  6   end").replace(
            "  8 end", "  7 end").replace("  9 return", "  8 return")
    errs = errors_of(write(tmp_path, src))
    assert any(ln == line and says in msg for _, ln, _, msg in errs), errs


def test_the_loss_line_is_elaborated_as_written_and_its_mistakes_are_the_elaborators(tmp_path: Path) -> None:
    src = (HERE / "dtraining.alg").read_text(encoding="utf-8").replace("log P(θ)[x_n[t+1], t]",
                                                                       "log P(θ)[x_n[t+1], t] + W_q")
    errs = errors_of(write(tmp_path, src))
    assert len(errs) == 1 and errs[0][1] == 14 and "W_q" in errs[0][3]


@pytest.mark.parametrize(("line", "says"), [
    ("P(x) ← x", "a function of the parameters x"),
    ("y ← x or x randomly with probability 1 or 0", "randomly with probability"),
    # a model's draw (dropout) is over a whole value: in a map's body it is refused with that reason, not as a
    # syntax error
    ("∀i : y[i] ← 0 or x[i] randomly with probability 0.1 or 0.9", "assign the value by its name, outside a map"),
    ("for i ∈ [d] : y[i] ← 0 or x[i] randomly with probability 0.1 or 0.9", "outside a map"),
    ("y ← 0 or x randomly with probability 0.1 or 0.8", "the probabilities of the two choices add up to one"),
    ("y ← {t ∈ [d] : x[t] = 0}", "a set {t ∈ [ℓ] : …} belongs to training algorithms"),
])
def test_the_training_notation_is_refused_in_a_model(tmp_path: Path, line: str, says: str) -> None:
    path = write(tmp_path, f"Algorithm: y ← f(x)\n  Input: x ∈ ℝ^{{d}}\n  Output: y ∈ ℝ^{{d}}\n  1 {line}\n"
                 "  2 return y = x\n")
    with pytest.raises(CompileError) as e:
        check(path, defines=["d=3"])
    [err] = e.value.errors
    assert isinstance(err, BadTypeError) and says in err.message and err.pos.line == 4


def test_a_sum_over_a_set_is_refused_in_a_model(tmp_path: Path) -> None:
    path = write(tmp_path, "Algorithm: y ← f(x)\n  Input: x ∈ ℝ^{d}\n  Output: y ∈ ℝ\n  1 return y = Σ_{t ∈ S} x[t]\n")
    with pytest.raises(CompileError) as e:
        check(path, defines=["d=3"])
    assert "a sum over a set, Σ_{t ∈ T̃}, belongs to training algorithms" in e.value.errors[0].message


FORWARD_AND_TRAINING = """Algorithm: y ← f(x)
  Input: x ∈ ℝ^{d}
  Output: y ∈ ℝ^{e}
  Parameters: W ∈ ℝ^{e × d}
  1 return y = x W
"""


def test_the_other_algorithms_of_the_file_are_still_checked(tmp_path: Path) -> None:
    train = (HERE / "dtraining.alg").read_text(encoding="utf-8").split("\n", 2)[2]
    path = write(tmp_path, '# both\nuse "paper/dtransformer.alg"\n' + FORWARD_AND_TRAINING + train)
    kinds = [k for k, *_ in errors_of(path)]
    assert kinds == [ShapeError]  # f's x W is wrong; DTraining checks
    path.write_text(path.read_text(encoding="utf-8").replace("return y = x W", "return y = W x"), encoding="utf-8")
    assert check(path) == ["f", "DTraining"]


def test_a_file_of_only_a_training_algorithm_compiles_its_loss_graph_by_default() -> None:
    m = load(HERE / "dtraining_gpt2.alg", entry=None)
    assert m.entry == "DTraining" and m.training is not None
    m2 = load(HERE / "dtraining_gpt2.alg", entry="13")
    assert m2.training == m.training
