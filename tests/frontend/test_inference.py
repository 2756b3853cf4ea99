"""Inference algorithms (the paper's Algorithms 14 and 15): their plans, their mistakes, their spellings.

An inference algorithm samples; it is checked line by line (frontend/inference.py) and reduced to a
GenerationPlan, never elaborated into a graph. These tests pin the plans of the repository's three
(models/paper/dinference.alg, models/paper/edinference.alg, GPT-2's in models/gpt2.alg), the
diagnostic of each kind of mistake at its line and column, the three spellings of the new lines, and
that a file holding a model and its inference algorithm still compiles the model.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

import pytest

from pseudoformer.base.errors import AlgError, CompileError
from pseudoformer.cli import main
from pseudoformer.frontend.errors import (
    ArityError,
    BadTypeError,
    HyperparameterError,
    InferenceError,
    UnknownNameError,
)
from pseudoformer.frontend.generation_plan import GenerationPlan
from pseudoformer.frontend.inference import inference_algorithms, is_inference, plan_inference
from pseudoformer.frontend.modules import load_program
from pseudoformer.model import load

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
GENERATION = Path(__file__).parent / "generation"
TINY = dict(L=1, H=2, d_e=4, d_mlp=8, d_attn=2, d_mid=2, ell_max=8, N_V=5, eps=1e-5)
TINY_ARGS = ["--config", os.devnull, *(a for k, v in TINY.items() for a in ("-D", f"{k}={v}"))]
_ERROR_LINE = re.compile(r"^(?P<file>\S+):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.*)$")


def plan(path: Path, entry: str | None = None) -> GenerationPlan:
    return plan_inference(load_program(path), entry)


def unplaced(p: GenerationPlan) -> GenerationPlan:
    return replace(p, pos=None)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- the plans of the three models

def test_plan_of_algorithm_14_over_dtransformer() -> None:
    path = MODELS / "paper" / "dinference.alg"
    p = plan(path)
    assert unplaced(p) == GenerationPlan(
        algorithm="DInference", model="DTransformer", encoder_input=None, model_output="probabilities",
        temperature="tau", max_new_tokens="ell_gen", bos_token=None, eos_token=None, returns="generated",
        pos=None)  # type: ignore[arg-type]
    assert (p.pos.file, p.pos.line, p.pos.col) == (str(path), 6, 1)


def test_plan_of_algorithm_15_over_edtransformer() -> None:
    p = plan(MODELS / "paper" / "edinference.alg")
    assert unplaced(p) == GenerationPlan(
        algorithm="EDInference", model="EDTransformer", encoder_input="z", model_output="probabilities",
        temperature="tau", max_new_tokens="ell_gen", bos_token="bos_token", eos_token="eos_token",
        returns="sequence", pos=None)  # type: ignore[arg-type]


def test_plan_of_gpt2_samples_the_softmax_of_its_logits() -> None:
    path = MODELS / "gpt2.alg"
    p = plan(path, "DInference")
    assert unplaced(p) == GenerationPlan(
        algorithm="DInference", model="GPT2", encoder_input=None, model_output="logits",
        temperature="tau", max_new_tokens="ell_gen", bos_token=None, eos_token=None, returns="generated",
        pos=None)  # type: ignore[arg-type]
    assert plan(path, "14") == p == plan(path)  # its number, and the file's only inference algorithm


def test_inference_algorithms_are_found_by_their_sample_line() -> None:
    prog = load_program(MODELS / "gpt2.alg")
    assert [a.name for a in inference_algorithms(prog)] == ["DInference"]
    assert [is_inference(a) for a in prog.entries()] == [False, True]
    with pytest.raises(CompileError, match="GPT2 is not an inference algorithm"):
        plan_inference(prog, "GPT2")
    with pytest.raises(CompileError, match="has no inference algorithm"):
        plan_inference(load_program(MODELS / "paper" / "dtransformer.alg"))


def test_check_prints_the_plan_on_the_files_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(MODELS / "gpt2.alg")]) == 0
    assert capsys.readouterr().out == (
        f"{MODELS / 'gpt2.alg'}: ok (GPT2, DInference) — DInference: samples from GPT2 (logits), "
        "τ = tau = 1.0, ℓ_gen = ell_gen = 32 new tokens\n")
    assert main(["check", str(MODELS / "paper" / "edinference.alg"), "--entry", "15"]) == 0
    assert capsys.readouterr().out == (
        f"{MODELS / 'paper' / 'edinference.alg'}: ok (EDInference) — EDInference: samples from EDTransformer "
        "(probabilities) given z, τ = tau, from bos_token until eos_token, at most ℓ_gen = ell_gen new tokens, "
        "returns the whole sequence\n")


# ---------------------------------------------------------------------- spellings

@pytest.mark.parametrize("style", ["ascii", "latex"])
def test_three_spellings_give_the_same_plans(style: str) -> None:
    def plans(s: str) -> list[GenerationPlan]:
        prog = load_program(GENERATION / f"inference.{s}.alg")
        return [unplaced(plan_inference(prog, a.label)) for a in inference_algorithms(prog)]

    unicode = plans("unicode")
    assert [p.returns for p in unicode] == ["generated", "sequence", "generated"]
    assert [p.model_output for p in unicode] == ["probabilities", "logits", "probabilities"]
    assert plans(style) == unicode


@pytest.mark.parametrize("interval", ["(0, ∞)", "(0, inf)", "(0, \\infty)"])
def test_an_interval_type_is_a_real_in_every_spelling(interval: str, tmp_path: Path) -> None:
    src = tmp_path / "interval.alg"
    src.write_text("Algorithm: y ← F(x)\n  Input: x ∈ ℝ^{d}\n  Output: y ∈ ℝ^{d}\n"
                   f"  Hyperparameters: η ∈ {interval}, a step size.\n  1 return y = η x\n", encoding="utf-8")
    (decl,) = load_program(src).root.algorithms[0].hyper
    assert (decl.type.kind, decl.type.dims, decl.type.interval) == ("real", (), (0.0, float("inf")))
    assert main(["check", str(src), "-D", "eta=0.5", "-D", "d=2"]) == 0


# ---------------------------------------------------------------------- mistakes, each at its place

def _copy(name: str) -> str:
    """A model file with its `use` paths made relative to models/, so a copy in tmp_path finds what it
    uses where any file finds the installed models."""
    path = MODELS / name
    text = path.read_text(encoding="utf-8")
    return re.sub(r'"([^"/][^"]*\.alg)"', lambda m: f'"{(path.parent / m.group(1)).relative_to(MODELS)}"', text)


D, ED, G = "paper/dinference.alg", "paper/edinference.alg", "gpt2.alg"
# (file, [(old, new)], [(line, col, class, text of the message)]) — one case per kind of mistake.
MISTAKES: dict[str, tuple[str, list[tuple[str, str]], list[tuple[int, int, type[AlgError], str]]]] = {
    "column_before_the_last": (D, [("P[:, ℓ + i − 1]", "P[:, ℓ + i − 2]")], [
        (15, 16, InferenceError, "expected P[:, ℓ + i − 1] (x has ℓ + i − 1 tokens at step i); this is one "
                                 "position before it")]),
    "column_after_the_last": (ED, [("P[:, length(x̂)]", "P[:, length(x̂) + 1]")], [
        (18, 16, InferenceError, "expected P[:, length(x̂)]; this is one position after it")]),
    "token_not_appended": (D, [("x ← [x, y]", "x ← [x, p]")], [
        (17, 11, InferenceError, "append the sampled token y to the end of x: x ← [x, y]")]),
    "appended_elsewhere": (D, [("x ← [x, y]", "z ← [x, y]")], [
        (17, 7, InferenceError, "must be appended to x, the sequence the model reads, not to z")]),
    "never_appended": (D, [("  6   x ← [x, y]\n  7 end\n  8 return", "  6 end\n  7 return")], [
        (13, 5, InferenceError, "the sampled token is never appended to the model's input")]),
    "unknown_model": (D, [("DTransformer(x |", "DTransformr(x |")], [
        (14, 11, UnknownNameError, "unknown algorithm DTransformr")]),
    "temperature_not_a_hyperparameter": (D, [("p^{1/τ}", "p^{1/T}")], [
        (16, 38, HyperparameterError, "the temperature T is not a hyperparameter of DInference")]),
    "temperature_a_size": (D, [("τ ∈ (0, ∞)", "τ ∈ ℕ")], [
        (16, 38, HyperparameterError, "the temperature τ is a positive real: τ ∈ (0, ∞)")]),
    "untempered": (D, [("p^{1/τ}", "p")], [
        (16, 33, InferenceError, "sample at a temperature: q ∝ p^{1/τ}")]),
    "bound_not_a_hyperparameter": (D, [("…, ℓ_gen do", "…, ℓ do")], [
        (13, 22, HyperparameterError, "the loop's bound ℓ is not a hyperparameter of DInference")]),
    "return_not_the_generated_part": (D, [("x[ℓ + 1 :", "x[ℓ :")], [
        (19, 18, InferenceError, "the first generated token is x[ℓ + 1], not x[ℓ]")]),
    "return_the_distribution": (D, [("return y = x[ℓ + 1 : ℓ + ℓ_gen]", "return y = P")], [
        (19, 16, InferenceError, "returns the generated tokens, x[ℓ + 1 : ℓ + ℓ_gen], or the whole sequence")]),
    "softmax_of_probabilities": (D, [("P ← DTransformer(x | θ̂)", "P ← softmax(DTransformer(x | θ̂))")], [
        (14, 11, InferenceError, "DTransformer returns probabilities already")]),
    "logits_without_softmax": (G, [("P ← softmax(GPT2(x | θ̂))", "P ← GPT2(x | θ̂)")], [
        (44, 11, InferenceError, "GPT2 returns logits (Y ∈ ℝ^{…}), not probabilities: P ← softmax(GPT2(x | θ̂))")]),
    "parameters_of_another_model": (D, [("θ̂ : DTransformer", "θ̂ : MHAttention")], [
        (14, 28, BadTypeError, "θ̂ holds the parameters of MHAttention (line 11), not of DTransformer")]),
    "parameters_not_declared": (D, [("DTransformer(x | θ̂)", "DTransformer(x | θ)")], [
        (14, 28, UnknownNameError, "θ is not a parameter of DInference")]),
    "lines_out_of_order": (D, [("5   sample a token y from q ∝ p^{1/τ}\n  6   x ← [x, y]",
                                "5   x ← [x, y]\n  6   sample a token y from q ∝ p^{1/τ}")], [
        (17, 7, InferenceError, "this line must come before line 5")]),
    "cap_one_short": (ED, [("length(x̂) ≤ ℓ_gen", "length(x̂) < ℓ_gen")], [
        (16, 27, InferenceError, "as length(x̂) ≤ ℓ_gen allows ℓ_gen; this one allows ℓ_gen − 1")]),
    "stop_on_another_value": (ED, [("y ≠ eos_token", "x̂ ≠ eos_token")], [
        (16, 11, InferenceError, "the loop stops when the sampled token y is the end token")]),
    "end_token_not_declared": (ED, [("y ≠ eos_token", "y ≠ end_token")], [
        (16, 15, HyperparameterError, "the end token end_token is not a hyperparameter of EDInference")]),
    "first_token_unset": (ED, [("2 y ← 0", "2 ℓ_z ← length(z)")], [
        (16, 11, InferenceError, "y has no value when the loop first tests it")]),
    "decoder_given_as_encoder": (ED, [("EDTransformer(z, x̂", "EDTransformer(x̂, x̂")], [
        (17, 25, InferenceError, "x̂, the sequence EDTransformer encodes once, is an input of EDInference")]),
    "encoder_left_out": (ED, [("EDTransformer(z, x̂", "EDTransformer(x̂")], [
        (17, 11, ArityError, "EDTransformer takes 2 token sequence(s)")]),
    "two_mistakes_reported_together": (D, [("P[:, ℓ + i − 1]", "P[:, ℓ + i]"), ("p^{1/τ}", "p^{1/T}")], [
        (15, 16, InferenceError, "this is one position after it"),
        (16, 38, HyperparameterError, "the temperature T is not a hyperparameter")]),
}


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_each_mistake_is_reported_at_its_place(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    name, edits, expected = MISTAKES[case]
    text = _copy(name)
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    monkeypatch.chdir(tmp_path)
    Path("case.alg").write_text(text, encoding="utf-8")
    # The CLI: exit 1, one positioned message per mistake with its line and a caret, no traceback.
    entry = "EDInference" if name == ED else "DInference"
    rc = main(["check", "case.alg", "--entry", entry, "--config", os.devnull])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.splitlines()
    reported = [i for i, t in enumerate(lines) if _ERROR_LINE.match(t)]
    assert len(reported) == len(expected), err
    if len(expected) > 1:
        assert lines[-1] == f"{len(expected)} errors"
    source = text.splitlines()
    for (line, col, _, fragment), i in zip(expected, reported, strict=True):
        m = _ERROR_LINE.match(lines[i])
        assert (m["file"], int(m["line"]), int(m["col"])) == ("case.alg", line, col), lines[i]
        assert fragment in m["msg"], lines[i]
        assert lines[i + 1] == f"    {source[line - 1]}" and lines[i + 2].index("^") == 4 + col - 1, err
    # The API: the same mistakes, each of its class.
    with pytest.raises(CompileError) as info:
        plan_inference(load_program("case.alg"), entry)
    assert [(type(e), e.pos.line, e.pos.col) for e in info.value.errors] == [(c, ln, co) for ln, co, c, _ in expected]


# ---------------------------------------------------------------------- models, entries and configs

def test_the_model_stays_the_entry_of_its_file() -> None:
    """gpt2.alg ends with DInference; without --entry (and without the config's) GPT2 is compiled."""
    model = load(MODELS / "gpt2.alg", config=os.devnull, defines=[f"{k}={v}" for k, v in TINY.items()])
    assert model.entry == "GPT2"


@pytest.mark.parametrize("command", ["compile", "run", "inspect"])
def test_an_inference_entry_is_sent_to_generate(command: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    argv = [command, str(MODELS / "gpt2.alg"), "--entry", "DInference", *TINY_ARGS]
    if command == "compile":
        argv += ["-o", str(tmp_path / "g.onnx")]
    if command == "run":
        argv += ["--input", "x=[[1, 2]]", "-o", str(tmp_path / "out.npz")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("error:") == 1, err
    assert "DInference is an inference algorithm" in err and "pseudoformer generate" in err, err
    assert "--entry GPT2" in err
    assert list(tmp_path.iterdir()) == []


def test_a_file_of_inference_algorithms_only_has_no_graph(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(MODELS / "paper" / "dinference.alg")]) == 1
    assert "defines only inference algorithms (DInference)" in capsys.readouterr().err


def test_inference_hyperparameters_are_not_unknown_to_the_model(tmp_path: Path) -> None:
    """τ and ℓ_gen set beside GPT-2's sizes, in an explicit config or with -D, are for its DInference."""
    toml = tmp_path / "tiny.toml"
    toml.write_text("[hyperparameters]\n" + "".join(f"{k} = {v}\n" for k, v in TINY.items())
                    + "ell_gen = 4\ntau = 0.7\nbos_token = 1\n", encoding="utf-8")
    with pytest.raises(CompileError, match="unknown hyperparameter bos_token for GPT2"):
        load(MODELS / "gpt2.alg", config=toml)  # GPT-2's DInference declares no bos_token
    toml.write_text(toml.read_text(encoding="utf-8").replace("bos_token = 1\n", ""), encoding="utf-8")
    assert load(MODELS / "gpt2.alg", config=toml, defines=["tau=0.5", "ℓ_gen=8"]).entry == "GPT2"


def test_config_values_of_the_plan_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    gpt2 = MODELS / "gpt2.alg"
    assert main(["check", str(gpt2), "--entry", "DInference", "-D", "tau=0", "-D", "ell_gen=2.5"]) == 1
    err = capsys.readouterr().err.splitlines()
    line = next(i for i, t in enumerate(gpt2.read_text(encoding="utf-8").splitlines(), 1) if "ℓ_gen ∈ ℕ, τ" in t)
    assert err[0] == f"{gpt2}:{line}:20: error: ell_gen = 2.5 in the config: ℓ_gen, the number of tokens to " \
                     "generate, must be a whole number ≥ 1"
    assert err[3] == f"{gpt2}:{line}:31: error: tau = 0 in the config: the temperature τ must lie in (0, ∞)"
    ed = MODELS / "paper" / "edinference.alg"
    assert main(["check", str(ed), "-D", "N_V=10", "-D", "eos_token=10"]) == 1
    assert "eos_token must be a token id, a whole number in 0 … N_V − 1 = 9" in capsys.readouterr().err


@pytest.mark.parametrize("source, line, col, text", [
    ("1 while 1 < 2 do\n  2 end\n  3 return y = x", 5, 5, "`while` belongs to inference algorithms"),
])
def test_a_model_cannot_use_what_only_sampling_needs(source: str, line: int, col: int, text: str,
                                                     tmp_path: Path) -> None:
    src = tmp_path / "model.alg"
    src.write_text("Algorithm: y ← F(x)\n  Input: x ∈ ℝ^{d}\n  Output: y ∈ ℝ^{d}\n  Hyperparameters: τ ∈ (0, ∞)\n"
                   f"  {source}\n", encoding="utf-8")
    with pytest.raises(CompileError) as info:
        load(src, defines=["d=2", "tau=2.0"])
    (e,) = info.value.errors
    assert (type(e), e.pos.line, e.pos.col) == (BadTypeError, line, col) and text in e.message


def test_a_model_cannot_call_an_inference_algorithm(tmp_path: Path) -> None:
    src = tmp_path / "wrap.alg"
    src.write_text('use DInference from "gpt2.alg"\nuse GPT2 from "gpt2.alg"\n\n'
                   "Algorithm: y ← Wrap(x | θ̂)\n  Input: x ∈ V*\n  Output: y ∈ V*\n  Parameters: θ̂ : GPT2\n"
                   "  1 return y = DInference(x | θ̂)\n", encoding="utf-8")
    with pytest.raises(CompileError) as info:
        load(src, config=os.devnull, defines=[f"{k}={v}" for k, v in TINY.items()])
    (e,) = info.value.errors
    assert (type(e), e.pos.line, e.pos.col) == (BadTypeError, 8, 16)
    assert "DInference is an inference algorithm" in e.message


# ---------------------------------------------------------------------- the language reference

def _section(title: str) -> str:
    doc = (ROOT / "docs" / "language.md").read_text(encoding="utf-8")
    start = doc.index(f"## {title}")
    return doc[start:doc.index("\n## ", start + 1)]


def test_the_docs_examples_are_the_checked_models(capsys: pytest.CaptureFixture[str]) -> None:
    """Every algorithm the section shows is in a model file, line for line, and that file checks."""
    blocks = re.findall(r"```\n(Algorithm 1[45].*?)```", _section("12. Inference algorithms"), re.S)
    assert len(blocks) == 2
    for block in blocks:
        homes = [p for p in (MODELS / "paper" / "dinference.alg", MODELS / "paper" / "edinference.alg",
                             MODELS / "gpt2.alg") if block in p.read_text(encoding="utf-8")]
        assert len(homes) == 1, block
        assert main(["check", str(homes[0]), "--config", os.devnull]) == 0, capsys.readouterr().err


def test_the_docs_diagnostic_is_what_check_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    shown = re.search(r"```\n(dinference\.alg:15:.*?)```", _section("12. Inference algorithms"), re.S)
    assert shown is not None
    monkeypatch.chdir(tmp_path)
    Path("dinference.alg").write_text(_copy(D).replace("ℓ + i − 1]", "ℓ + i − 2]"), encoding="utf-8")
    assert main(["check", "dinference.alg"]) == 1
    assert capsys.readouterr().err == shown.group(1)
