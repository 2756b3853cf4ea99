"""One CompileOptions from every command's arguments and from the API's keywords; one problems() for the rules
of which options go together; one spelling of --backend (the old ones read, with a note)."""

from __future__ import annotations

import re
import warnings
from dataclasses import fields

import pytest

from pseudoformer.backends.options import BACKENDS, CompileOptions
from pseudoformer.base.errors import UsageError
from pseudoformer.cli import build_parser, main
from pseudoformer.compile_options import from_arguments, from_keywords
from pseudoformer.passes.quantize import QuantizeOptions


def _options(*argv: str) -> CompileOptions:
    return from_arguments(build_parser().parse_args(list(argv)))


def test_compile_arguments() -> None:
    o = _options("compile", "gpt2", "-o", "m.so", "--backend", "tvm", "--target", "cuda", "--tvm-params", "bind",
                 "--dtype", "float16", "-O1", "--quantize", "int4", "--accuracy-level", "4")
    assert (o.backend, o.target, o.tvm_params, o.dtype, o.opt_level) == ("tvm", "cuda", "bind", "float16", 1)
    assert o.quantize == QuantizeOptions(bits=4, accuracy_level=4) and o.int8_activations
    o = _options("compile", "gpt2", "-o", "m.onnx", "--opset", "23", "--padding-mask", "--functions",
                 "--contrib-ops", "--quantize", "int8", "--block-size", "64", "--symmetric")
    assert (o.backend, o.opset, o.padding_mask, o.functions, o.contrib_ops, o.opt_level) == ("onnx", 23, True, True,
                                                                                              True, 2)
    assert o.quantize == QuantizeOptions(bits=8, block_size=64, symmetric=True) and not o.int8_activations


def test_genai_folder_arguments() -> None:
    o = _options("compile", "llama", "--genai-folder", "out", "--quantize", "int4", "--contrib-ops")
    assert o.contrib_ops and o.quantize == QuantizeOptions(bits=4) and o.opt_level == 2
    o = _options("compile", "llama", "--genai-folder", "out", "--dtype", "float16", "--provider", "cuda")
    assert (o.dtype, o.provider) == ("float16", "cuda")
    with pytest.raises(UsageError, match=r"^error: -O1, --opset: an onnxruntime-genai folder is an ONNX"):
        _options("compile", "llama", "--genai-folder", "out", "--dtype", "float16", "-O1", "--opset", "23")


def test_inspect_arguments() -> None:
    o = _options("inspect", "--passes", "--backend", "tvm", "--quantize", "int4")
    assert (o.backend, o.opt_level, o.quantize) == ("tvm", 2, QuantizeOptions(bits=4))
    assert _options("inspect", "gpt2", "-O1", "--contrib-ops").opt_level == 1


@pytest.mark.parametrize(("argv", "backend", "level"), [
    (["run", "gpt2", "--input", "x=[[1]]", "-o", "y.npz"], "numpy", 0),  # the reference runs the paper's graph
    (["run", "m.onnx", "--input", "x=[[1]]", "-o", "y.npz"], "onnx", 2),
    (["run", "m.so", "--input", "x=[[1]]", "-o", "y.npz"], "tvm", 2),
    (["run", "gpt2", "--input", "x=[[1]]", "-o", "y.npz", "--backend", "onnx", "--provider", "cuda",
      "--threads", "2"], "onnx", 2),
])
def test_run_arguments(argv: list[str], backend: str, level: int) -> None:
    o = _options(*argv)
    assert (o.backend, o.opt_level) == (backend, level)
    assert o.provider == ("cuda" if "cuda" in argv else "cpu") and o.threads == (2 if "--threads" in argv else None)


def test_generate_arguments() -> None:
    o = _options("generate", "gpt2", "--backend", "tvm", "--quantize", "int4", "--accuracy-level", "4")
    assert (o.backend, o.opt_level, o.int8_activations) == ("tvm", 2, True)
    o = _options("generate", "gpt2", "--threads", "1", "--backend", "numpy")
    # generate derives its cache from -O2's fused attention, whatever the backend
    assert (o.backend, o.opt_level, o.threads) == ("numpy", 2, 1)


def test_train_arguments() -> None:
    o = _options("train", "loss.alg", "--data", "d.npy", "-O1", "--threads", "2")
    assert (o.backend, o.opt_level, o.threads, o.provider, o.quantize) == ("onnx", 1, 2, "cpu", None)
    assert not o.torch_compile
    assert _options("train", "loss.alg", "--data", "d.npy", "--backend", "torch", "--torch-compile").torch_compile


@pytest.mark.parametrize(("old", "new"), [("interpreter", "numpy"), ("onnxruntime", "onnx")])
def test_old_backend_spellings_are_read_with_a_note(old: str, new: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _options("train", "loss.alg", "--data", "d.npy", "--backend", old).backend == new
    assert capsys.readouterr().err == f"note: --backend {old} is now spelled --backend {new}\n"
    with pytest.warns(DeprecationWarning, match=f"backend={old!r} is now spelled backend={new!r}"):
        assert from_keywords(None, {"backend": old}, "train").backend == new


def test_every_command_spells_backend_one_way() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.choices and "compile" in a.choices)
    metavars = {name: next(a.metavar for a in p._actions if "--backend" in a.option_strings)
                for name, p in sub.choices.items() if any("--backend" in a.option_strings for a in p._actions)}
    assert set(metavars) == {"inspect", "compile", "run", "generate", "train"}
    assert set(metavars.values()) == {"|".join(BACKENDS)}


@pytest.mark.parametrize("command", ["compile", "inspect", "run", "generate", "train", "genai"])
def test_the_defaults_go_together_for_every_command(command: str) -> None:
    backend = "numpy" if command == "run" else "onnx"
    assert CompileOptions(backend=backend, opt_level=2).problems(command) == []


Q4 = QuantizeOptions(bits=4)
RULES = [
    ({"backend": "xla"}, "run", "unknown backend 'xla' (choose numpy, onnx or tvm)"),
    ({"backend": "numpy"}, "compile", "compile does not take --backend numpy (choose onnx, tvm or torch)"),
    ({"dtype": "bfloat16"}, "compile", "--dtype bfloat16 is not offered: onnxruntime's CPU provider has no "
     "bfloat16 arithmetic"),
    ({"dtype": "bfloat16"}, "generate", "--dtype bfloat16 is not offered"),
    ({"dtype": "bfloat16"}, "genai", "--dtype bfloat16 is not offered"),
    ({"opt_level": 3}, "compile", "no optimisation level -O3"),
    ({"opset": 99}, "inspect", "--opset 99: pick one from 17 to 26"),
    ({"provider": "tpu"}, "run", "unknown provider 'tpu' (choose cpu or cuda)"),
    ({"provider": "cuda", "backend": "numpy"}, "run", "--provider cuda is for the onnx backend; numpy runs on the CPU"),
    ({"provider": "cuda", "backend": "numpy"}, "generate", "--provider cuda is for the onnx backend; numpy runs on "
     "the CPU"),
    ({"provider": "cuda", "backend": "tvm"}, "train", "--provider cuda is for the onnx or torch backend; tvm builds for "
     "--target cuda instead"),
    ({"dtype": "float16", "backend": "numpy"}, "generate", "--dtype float16 is for the onnx backend; numpy generates "
     "in float32"),
    ({"provider": "cuda", "backend": "tvm"}, "compile", "--provider cuda is for the onnx backend; tvm builds for "
     "--target cuda instead"),
    ({"provider": "cuda"}, "inspect", "--provider cuda: inspect runs on the CPU only for now"),
    ({"threads": 0}, "generate", "--threads must be between 1 and"),
    ({"threads": 2, "backend": "tvm"}, "generate", "the TVM backend sizes its own thread pool"),
    ({"target": "cuda"}, "compile", "--target cuda is for the tvm backend"),
    ({"tvm_params": "bind"}, "compile", "--tvm-params is for the tvm backend"),
    ({"tvm_params": "inline", "backend": "tvm"}, "compile", "--tvm-params inline: choose args or bind"),
    ({"padding_mask": True, "backend": "tvm"}, "compile", "--padding-mask is for the onnx backend"),
    ({"functions": True, "backend": "tvm"}, "compile", "--functions is for the onnx backend"),
    ({"contrib_ops": True, "backend": "numpy"}, "generate", "--contrib-ops is for the onnx backend"),
    ({"int8_activations": True, "quantize": Q4}, "compile", "int8 activations are the tvm backend's int4 products"),
    ({"int8_activations": True, "backend": "tvm"}, "generate", "int8 activations are the tvm backend's int4 products"),
    ({"backend": "tvm", "padding_mask": True}, "genai", "--backend tvm, --padding-mask: an onnxruntime-genai folder"),
    ({"torch_compile": True}, "train", "--torch-compile puts the torch backend's loss module under torch.compile: add "
     "--backend torch (the onnx backend has onnxruntime optimise its step graph)"),
    ({"torch_compile": True, "backend": "tvm"}, "train", "--torch-compile puts the torch backend's loss module"),
    ({"torch_compile": True, "backend": "torch"}, "compile", "--torch-compile is train's"),
]


@pytest.mark.parametrize(("given", "command", "said"), RULES, ids=[f"{c}-{'-'.join(g)}" for g, c, _ in RULES])
def test_each_rule_is_one_sentence(given: dict, command: str, said: str) -> None:
    options = CompileOptions(**{"opt_level": 2, **given})
    problems = options.problems(command)
    assert len(problems) == 1 and problems[0].startswith(said), problems
    with pytest.raises(UsageError, match="^error: " + re.escape(said)):
        options.checked(command)


def test_every_problem_is_said_at_once() -> None:
    options = CompileOptions(backend="tvm", padding_mask=True, functions=True, contrib_ops=True)
    assert len(options.problems("compile")) == 3


def test_keywords_are_the_fields_and_quantize_details() -> None:
    o = from_keywords(None, {"backend": "tvm", "quantize": "int4", "block_size": 64, "symmetric": True,
                             "quantize_output": False}, "compile", opt_level=2)
    assert o.quantize == QuantizeOptions(bits=4, block_size=64, symmetric=True, output=False)
    base = CompileOptions(opt_level=1, quantize=Q4)
    assert from_keywords(base, {"contrib_ops": True}, "compile") == CompileOptions(opt_level=1, quantize=Q4,
                                                                                   contrib_ops=True)
    with pytest.raises(TypeError, match="compile\\(\\) got an unexpected keyword argument 'colour'"):
        from_keywords(None, {"colour": "red"}, "compile")
    with pytest.raises(UsageError, match="set these in the QuantizeOptions"):
        from_keywords(None, {"quantize": Q4, "block_size": 64}, "compile")
    with pytest.raises(UsageError, match="--functions is for the onnx backend"):
        from_keywords(None, {"backend": "tvm", "functions": True}, "compile")


def test_every_flagged_field_is_a_flag_of_some_command() -> None:
    """A field marked as a flag is read by from_arguments under its own name: some command must have it."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.choices and "compile" in a.choices)
    flags = {s for p in sub.choices.values() for a in p._actions for s in a.option_strings}
    for f in fields(CompileOptions):
        if "flag" in f.metadata:
            assert f.metadata["flag"] in flags, f.name


def test_the_api_keeps_its_keywords(tmp_path) -> None:
    import pseudoformer

    sizes = ["L=1", "H=2", "d_e=16", "d_mlp=32", "d_attn=8", "d_mid=8", "N_V=50", "ell_max=16"]
    compiled = pseudoformer.compile("gpt2", defines=sizes, quantize="int8", block_size=16)
    assert compiled.options.quantize == QuantizeOptions(bits=8, block_size=16) and compiled.opt_level == 2
    by_value = pseudoformer.compile("gpt2", defines=sizes, options=compiled.options)
    assert by_value.options == compiled.options
    with pytest.raises(UsageError, match="--padding-mask is for the onnx backend"):
        pseudoformer.compile("gpt2", defines=sizes, backend="tvm", padding_mask=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ids = pseudoformer.generate("gpt2", [1, 2], defines=sizes, max_new_tokens=2, temperature=0, backend="numpy")
    assert len(ids) == 2


def test_the_command_line_refuses_cuda_where_it_cannot_run_it(capsys: pytest.CaptureFixture[str]) -> None:
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has CUDA: the refusal is for one without it")
    assert main(["generate", "gpt2", "--prompt-ids", "1", "--max-new-tokens", "1", "--provider", "cuda"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: CUDA was asked for, but this onnxruntime has no CUDAExecutionProvider")
    assert "pseudoformer[gpu]" in err and "\n" not in err


def test_every_compile_flag_is_documented() -> None:
    """A compile option the command line takes is named in README.md or docs/*.md, in code (`…`)."""
    from tests.conftest import ROOT

    text = "\n".join(p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
    spans = re.findall(r"`([^`]+)`", text)
    for f in fields(CompileOptions):
        if "flag" in f.metadata:
            flag = f.metadata["flag"]
            assert any(re.search(rf"(^|\s|\[){re.escape(flag)}(\b|$)", s) for s in spans), flag


@pytest.mark.parametrize("command", ["run", "generate", "train"])
def test_provider_help_says_what_cuda_is_on_each_backend(command: str) -> None:
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]  # type: ignore[union-attr]
    text = " ".join(next(a for a in sub._actions if a.dest == "provider").help.split())
    assert "onnxruntime's CUDA provider with --backend onnx" in text
    assert ("torch's CUDA device" in text) == (command == "train")
