"""The `pseudoformer` command, through `pseudoformer.cli.main([...])` as a user would type it.

Good input: check, inspect, run (numpy and onnx backends, .alg and .onnx files) and compile work
and agree with each other and with HuggingFace. Bad input: exit code 1, one message on stderr that
says what is wrong, no traceback, and no file left behind, neither the output nor a temporary.
"""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from safetensors.numpy import save_file
from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel

import pseudoformer
from tests.cli.conftest import Cli
from tests.models.hf_util import log_softmax

MODELS = Path(__file__).resolve().parents[2] / "models"  # not cwd-relative: pytest may run from anywhere
GPT2, BERT = str(MODELS / "gpt2.alg"), str(MODELS / "bert.alg")
ED = str(MODELS / "paper" / "edtransformer.alg")
ALG_FILES = sorted(MODELS.rglob("*.alg"))

N_V = 11
TINY = dict(L=1, H=2, d_e=8, d_mlp=16, d_attn=4, d_mid=4, ell_max=40, N_V=N_V, eps=1e-5)
# --config /dev/null: the packaged gpt2.toml is gpt2-small, far too big for these tests.
SMALL_GPT2 = ["--config", os.devnull, *(a for k, v in TINY.items() for a in ("-D", f"{k}={v}"))]
HAS_CUDA = "CUDAExecutionProvider" in onnxruntime.get_available_providers()

@pytest.fixture
def tokens_npy(tmp_path: Path) -> Path:
    p = tmp_path / "tokens.npy"
    np.save(p, np.array([[1, 2, 3]], dtype=np.int64))
    return p


def assert_user_error(result: tuple[int, str, str], *fragments: str, left_empty: Path | None = None) -> None:
    code, _, err = result
    assert code == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    assert err.count("error:") == 1, err  # one message, not one per layer that saw the problem
    for f in fragments:
        assert f in err, f"{f!r} not in {err!r}"
    if left_empty is not None:
        assert list(left_empty.iterdir()) == [], "a failed command left files behind"


# ---- check, inspect

def test_version_via_python_m() -> None:
    done = subprocess.run([sys.executable, "-m", "pseudoformer.cli", "--version"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"pseudoformer {pseudoformer.__version__}"


def test_check_every_model_file(cli: Cli) -> None:
    code, out, err = cli("check", *ALG_FILES)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == len(ALG_FILES) >= 7
    for f, line in zip(ALG_FILES, lines, strict=True):
        assert line.startswith(f"{f}: ok (")


@pytest.mark.parametrize("fmt", ["text", "dot", "json"])
def test_inspect_formats_to_stdout_and_to_a_file(cli: Cli, out_dir: Path, fmt: str) -> None:
    code, out, err = cli("inspect", GPT2, *SMALL_GPT2, "--format", fmt)
    assert code == 0, err
    if fmt == "json":
        json.loads(out)
    elif fmt == "dot":
        assert out.lstrip().startswith("digraph")
    else:
        assert "W_e" in out
    target = out_dir / f"gpt2.{fmt}"
    code, out2, err = cli("inspect", GPT2, *SMALL_GPT2, "--format", fmt, "-o", target)
    assert code == 0, err
    assert out2 == ""
    assert target.read_text(encoding="utf-8").rstrip("\n") == out.rstrip("\n")
    assert [p.name for p in out_dir.iterdir()] == [target.name]  # no temporary left beside it


@pytest.mark.parametrize("fmt", ["text", "svg", "html"])
def test_inspect_never_materialises_the_weights(cli: Cli, out_dir: Path, fmt: str) -> None:
    """A graph whose parameters would take 4 TB (N_V·d_e float32 embedding, N_V near the largest size a dimension may
    have) is shown all the same: inspect draws no weights, so neither the memory check nor the time to draw them
    applies."""
    big = {f"N_V={N_V}": "N_V=2000000000", "d_e=8": "d_e=512"}
    huge = [big.get(a, a) for a in SMALL_GPT2]
    code, out, err = cli("check", GPT2, *huge)
    assert code == 0, err
    code, _, err = cli("run", GPT2, *huge, "--input", "x=[[1, 2]]", "-o", out_dir / "y.npz")
    assert code == 1 and "memory available" in err  # the same sizes, with weights, are refused
    code, out, err = cli("inspect", GPT2, *huge, "--format", fmt, "-o", out_dir / f"g.{fmt}")
    assert code == 0, err
    assert fmt != "text" or "2000000000" in (out_dir / f"g.{fmt}").read_text(encoding="utf-8")


def test_inspect_refusals_says_which_head_did_not_fuse_and_why(cli: Cli, tmp_path: Path) -> None:
    """Scores subtracted from an ALiBi-like bias are refused, at the head's line, with a caret; the
    same model as written in tests/passes/attention_biases/ fuses and says so."""
    src = pathlib.Path("tests/passes/attention_biases/alibi.alg").read_text(encoding="utf-8")
    flipped = src.replace("S[t_z, t_x] ← S[t_z, t_x] + m · (t_z − t_x)", "S[t_z, t_x] ← m · (t_z − t_x) − S[t_z, t_x]")
    assert flipped != src
    sizes = ["--entry", "ALiBi", "-D", "H=2", "-D", "d_x=4", "-D", "d_attn=2", "-D", "d_mid=2"]
    (tmp_path / "neg.alg").write_text(flipped, encoding="utf-8")
    code, out, err = cli("inspect", tmp_path / "neg.alg", *sizes, "--refusals")
    assert code == 0, err
    lines = out.splitlines()
    # both heads are refused: counted, on the one line they share
    assert lines[0].startswith(f"{tmp_path / 'neg.alg'}:17:5: note: attention refused 2 times: the scores are "
                               "subtracted")
    assert "negates them" in lines[0] and lines[2].strip() == "^" and lines[-1] == "2 refused fusions"
    assert "attention" not in lines[-2] and lines[-2].startswith("rules fired: ")  # the refused heads never fired
    code, out, err = cli("inspect", "tests/passes/attention_biases/alibi.alg", *sizes, "--refusals")
    assert code == 0, err
    # and as written, both heads fuse: the counters say so beside the total
    assert out.strip().splitlines()[-1] == "no refused fusions"
    assert "attention 2" in out.strip().splitlines()[-2].removeprefix("rules fired: ").split(", ")


# ---- run and compile

def _y(path: Path) -> np.ndarray:
    with np.load(path, allow_pickle=False) as z:
        assert list(z) == ["Y"]
        return z["Y"]


def test_run_numpy_and_onnx_backends_agree_from_a_file_and_inline(cli: Cli, out_dir: Path,
                                                                  tokens_npy: Path) -> None:
    results = {}
    for backend in ("numpy", "onnx"):
        for how, spec in (("file", f"x={tokens_npy}"), ("inline", "x=[[1,2,3]]")):
            target = out_dir / f"{backend}-{how}.npz"
            code, _, err = cli("run", GPT2, *SMALL_GPT2, "--backend", backend, "--input", spec, "-o", target)
            assert code == 0, err
            assert f"wrote {target}: Y[1, 3, {N_V}]" in err
            results[backend, how] = _y(target)
    ref = results["numpy", "file"]
    assert ref.shape == (1, 3, N_V)
    for y in results.values():
        assert np.abs(y - ref).max() <= 1e-5


def test_compile_then_run_the_onnx_file(cli: Cli, out_dir: Path, tokens_npy: Path) -> None:
    model = out_dir / "tiny.onnx"
    code, _, err = cli("compile", GPT2, *SMALL_GPT2, "-o", model)
    assert code == 0, err
    assert f"wrote {model}: GPT2" in err
    onnx.checker.check_model(onnx.load(str(model)), full_check=True)

    code, _, err = cli("run", model, "--input", f"x={tokens_npy}", "-o", out_dir / "onnx.npz")
    assert code == 0, err
    code, _, err = cli("run", GPT2, *SMALL_GPT2, "--input", f"x={tokens_npy}", "-o", out_dir / "numpy.npz")
    assert code == 0, err
    assert np.abs(_y(out_dir / "onnx.npz") - _y(out_dir / "numpy.npz")).max() <= 1e-5
    assert sorted(p.name for p in out_dir.iterdir()) == ["numpy.npz", "onnx.npz", "tiny.onnx"]


@pytest.mark.parametrize("options", [["--weights", "w.safetensors"], ["--seed", "3"], ["-D", "L=2"],
                                     ["--seed", "0", "-D", "H=4"], ["--config", "m.toml"], ["-O", "1"]])
def test_run_refuses_source_options_on_a_compiled_model(cli: Cli, out_dir: Path, tokens_npy: Path,
                                                        options: list[str]) -> None:
    """A .onnx file holds its weights and sizes; `run model.onnx --weights W --seed S -D k=v` once ignored all three."""
    model = out_dir / "tiny.onnx"
    assert cli("compile", GPT2, *SMALL_GPT2, "-o", model)[0] == 0
    flags = " and ".join(o for o in options if o.startswith("-"))
    assert_user_error(cli("run", model, *options, "--input", f"x={tokens_npy}", "-o", out_dir / "y.npz"),
                      f"{flags} {'is' if flags.count(' and ') == 0 else 'are'} for a .alg file; tiny.onnx is compiled",
                      "pass them to `pseudoformer compile`")
    assert sorted(p.name for p in out_dir.iterdir()) == ["tiny.onnx"]


def _small_hf_gpt2(directory: Path) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(n_embd=32, n_head=4, n_layer=2, n_positions=64, vocab_size=101,
                                    bos_token_id=0, eos_token_id=0)).eval()
    with torch.no_grad():  # HF's zero biases and unit gains would let a dropped one go unnoticed
        for name, p in hf.named_parameters():
            if name.endswith("bias") or "ln_" in name:
                p.add_(torch.randn_like(p) * 0.1)
    hf.save_pretrained(directory)
    return hf


def test_acceptance_compile_gpt2_with_hf_weights(cli: Cli, tmp_path: Path, out_dir: Path) -> None:
    """`pseudoformer compile models/gpt2.alg --weights DIR -o gpt2.onnx`, then run the file: HF's numbers."""
    hf = _small_hf_gpt2(tmp_path / "hf")
    model = out_dir / "gpt2.onnx"
    code, _, err = cli("compile", GPT2, "--weights", tmp_path / "hf", "-o", model)
    assert code == 0, err
    x = np.random.default_rng(0).integers(0, 101, (2, 16), dtype=np.int64)
    np.save(tmp_path / "x.npy", x)
    code, _, err = cli("run", model, "--input", f"x={tmp_path / 'x.npy'}", "-o", out_dir / "y.npz")
    assert code == 0, err
    with torch.no_grad():
        want = hf(torch.from_numpy(x)).logits.numpy()
    assert np.abs(log_softmax(_y(out_dir / "y.npz")) - log_softmax(want)).max() <= 1e-4


# ---- bad input: exit 1, one message, nothing left behind

def test_unknown_backend(cli: Cli, out_dir: Path) -> None:
    assert_user_error(cli("run", GPT2, *SMALL_GPT2, "--backend", "xla", "--input", "x=[[1]]",
                          "-o", out_dir / "y.npz"), "unknown backend 'xla'", left_empty=out_dir)
    assert_user_error(cli("compile", GPT2, *SMALL_GPT2, "--backend", "xla", "-o", out_dir / "m.onnx"),
                      "unknown backend 'xla'", left_empty=out_dir)


def test_unknown_provider(cli: Cli, out_dir: Path) -> None:
    assert_user_error(cli("run", GPT2, *SMALL_GPT2, "--backend", "onnx", "--provider", "tpu", "--input", "x=[[1]]",
                          "-o", out_dir / "y.npz"), "unknown provider 'tpu'", left_empty=out_dir)


@pytest.mark.skipif(HAS_CUDA, reason="this onnxruntime has CUDA, so provider cuda is no mistake")
def test_cuda_provider_without_cuda(cli: Cli, tmp_path: Path, out_dir: Path) -> None:
    model = tmp_path / "tiny.onnx"
    assert cli("compile", GPT2, *SMALL_GPT2, "-o", model)[0] == 0
    for source in ([GPT2, *SMALL_GPT2, "--backend", "onnx"], [model]):
        assert_user_error(cli("run", *source, "--provider", "cuda", "--input", "x=[[1]]", "-o", out_dir / "y.npz"),
                          "CUDAExecutionProvider", "pseudoformer[gpu]", left_empty=out_dir)


@pytest.mark.parametrize("command", ["compile", "run", "inspect"])
def test_output_in_a_missing_directory(cli: Cli, tmp_path: Path, command: str) -> None:
    target = tmp_path / "no" / "such" / "dir" / "out"
    extra = ["--input", "x=[[1]]"] if command == "run" else []
    assert_user_error(cli(command, GPT2, *SMALL_GPT2, *extra, "-o", target), "cannot write", str(target.parent))
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("command", ["compile", "run", "inspect"])
@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where not even root can write")
def test_output_in_a_directory_nobody_can_write(cli: Cli, command: str) -> None:
    extra = ["--input", "x=[[1]]"] if command == "run" else []
    assert_user_error(cli(command, GPT2, *SMALL_GPT2, *extra, "-o", "/proc/pseudoformer-test.out"), "cannot ")
    assert not Path("/proc/pseudoformer-test.out").exists()


def _partial_write_then_fail(*args: object, **kwargs: object) -> None:
    """Stands in for a writer that dies half way (a full disk): some bytes land, then OSError."""
    target = next((a for a in args if isinstance(a, str | os.PathLike)), None)
    if target is not None:
        Path(target).write_bytes(b"partial")
    else:
        fh = next(a for a in args if hasattr(a, "write"))
        fh.write(b"partial")
    raise OSError(28, "No space left on device")


def test_compile_that_fails_while_writing_leaves_nothing(cli: Cli, out_dir: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnx, "save_model", _partial_write_then_fail)
    assert_user_error(cli("compile", GPT2, *SMALL_GPT2, "-o", out_dir / "m.onnx"), "no space left on device",
                      left_empty=out_dir)


def test_run_that_fails_while_writing_leaves_nothing(cli: Cli, out_dir: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(np, "savez", _partial_write_then_fail)
    assert_user_error(cli("run", GPT2, *SMALL_GPT2, "--input", "x=[[1]]", "-o", out_dir / "y.npz"),
                      "no space left on device", left_empty=out_dir)


@pytest.mark.parametrize("command", ["compile", "run", "inspect"])
def test_a_failing_final_rename_leaves_nothing(cli: Cli, out_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                               command: str) -> None:
    def refuse(src: object, dst: object) -> None:
        raise OSError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    extra = ["--input", "x=[[1]]"] if command == "run" else []
    assert_user_error(cli(command, GPT2, *SMALL_GPT2, *extra, "-o", out_dir / "out"), "Permission denied",
                      left_empty=out_dir)


def test_weights_of_the_wrong_shape(cli: Cli, tmp_path: Path, out_dir: Path) -> None:
    weights = tmp_path / "w.safetensors"
    save_file({"W_e": np.zeros((8, N_V + 1), np.float32)}, str(weights))
    assert_user_error(cli("compile", GPT2, *SMALL_GPT2, "--weights", weights, "-o", out_dir / "m.onnx"),
                      "do not fit", "W_e: mis-shaped, expected (8, 11), got (8, 12)", left_empty=out_dir)


def _bert_checkpoint(directory: Path) -> None:
    torch.manual_seed(0)
    BertModel(BertConfig(hidden_size=8, num_attention_heads=2, num_hidden_layers=1, intermediate_size=16,
                         vocab_size=N_V, max_position_embeddings=40)).save_pretrained(directory)


def test_hf_checkpoint_of_another_model_type(cli: Cli, tmp_path: Path, out_dir: Path) -> None:
    _bert_checkpoint(tmp_path / "bert")
    assert_user_error(cli("compile", GPT2, "--weights", tmp_path / "bert", "-o", out_dir / "m.onnx"),
                      "do not fit", "HuggingFace 'bert' checkpoint", left_empty=out_dir)
    _small_hf_gpt2(tmp_path / "gpt2")
    # GPT-2's config.json sets d_e but not BERT's d_f: the mix must be blamed on the checkpoint,
    # not reported as a shape error in bert.alg.
    result = cli("compile", BERT, "--weights", tmp_path / "gpt2", "-o", out_dir / "m.onnx")
    assert_user_error(result, "HuggingFace 'gpt2' checkpoint", "does not fit bert.alg", left_empty=out_dir)
    assert not re.search(r"bert\.alg:\d+", result[2])  # no file:line position in the source


def test_missing_input(cli: Cli, out_dir: Path) -> None:
    ed = ["--config", os.devnull, *(a for k, v in {**TINY, "L_enc": 1, "L_dec": 1}.items()
                                     if k not in ("L", "eps")
                                     for a in ("-D", f"{k}={v}"))]
    assert_user_error(cli("run", ED, *ed, "--input", "x=[[1,2]]", "-o", out_dir / "y.npz"),
                      "missing input z", left_empty=out_dir)
    # No --input at all: argparse's required-argument error, still one message and exit 1.
    assert_user_error(cli("run", GPT2, *SMALL_GPT2, "-o", out_dir / "y.npz"), "--input", left_empty=out_dir)


def test_wrong_input_name(cli: Cli, tmp_path: Path, out_dir: Path) -> None:
    assert_user_error(cli("run", GPT2, *SMALL_GPT2, "--input", "tokens=[[1,2]]", "-o", out_dir / "y.npz"),
                      "missing input x", "unknown input tokens", left_empty=out_dir)
    model = tmp_path / "tiny.onnx"
    assert cli("compile", GPT2, *SMALL_GPT2, "-o", model)[0] == 0
    assert_user_error(cli("run", model, "--input", "tokens=[[1,2]]", "-o", out_dir / "y.npz"), "tokens",
                      left_empty=out_dir)


def test_float_tokens(cli: Cli, tmp_path: Path, out_dir: Path) -> None:
    floats = tmp_path / "floats.npy"
    np.save(floats, np.array([[1.5, 2.0]]))
    for spec in (f"x={floats}", "x=[[1.5, 2]]"):
        for backend in ("numpy", "onnx"):
            assert_user_error(cli("run", GPT2, *SMALL_GPT2, "--backend", backend, "--input", spec,
                                  "-o", out_dir / "y.npz"), "token ids must be integers", left_empty=out_dir)
    model = tmp_path / "tiny.onnx"
    assert cli("compile", GPT2, *SMALL_GPT2, "-o", model)[0] == 0
    assert_user_error(cli("run", model, "--input", f"x={floats}", "-o", out_dir / "y.npz"), "float64",
                      left_empty=out_dir)


class _Trap:
    """Unpickling this creates a file: proof that a loader unpickled what it was handed."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return pathlib.Path.touch, (self.marker,)


def test_pickled_npy_is_refused_without_unpickling(cli: Cli, tmp_path: Path, out_dir: Path) -> None:
    marker = tmp_path / "unpickled"
    evil = tmp_path / "evil.npy"
    np.save(evil, np.array([_Trap(marker), 1], dtype=object), allow_pickle=True)
    pickle.loads(pickle.dumps(_Trap(tmp_path / "sanity")))  # the trap does spring when unpickled
    assert (tmp_path / "sanity").exists()
    for source in ([GPT2, *SMALL_GPT2], [GPT2, *SMALL_GPT2, "--backend", "onnx"]):
        assert_user_error(cli("run", *source, "--input", f"x={evil}", "-o", out_dir / "y.npz"),
                          "--input x", "never unpickles", left_empty=out_dir)
    assert not marker.exists()


def test_out_of_range_token(cli: Cli, out_dir: Path) -> None:
    for backend in ("numpy", "onnx"):
        assert_user_error(cli("run", GPT2, *SMALL_GPT2, "--backend", backend, "--input", f"x=[[1,{N_V}]]",
                              "-o", out_dir / "y.npz"), str(N_V), left_empty=out_dir)


@pytest.mark.parametrize("define,message", [
    ("L=two", "-D L='two': the value must be a number"),
    ("L", "-D takes NAME=VALUE, got 'L'"),
    ("foo=3", "unknown hyperparameter foo"),
])
@pytest.mark.parametrize("command", ["inspect", "compile", "run"])
def test_bad_define(cli: Cli, out_dir: Path, command: str, define: str, message: str) -> None:
    extra = ["--input", "x=[[1]]"] if command == "run" else []
    assert_user_error(cli(command, GPT2, *SMALL_GPT2, "-D", define, *extra, "-o", out_dir / "out"), message,
                      left_empty=out_dir)


def test_missing_config_file(cli: Cli, tmp_path: Path, out_dir: Path) -> None:
    missing = tmp_path / "nope.toml"
    for command in ("check", "inspect"):
        assert_user_error(cli(command, GPT2, "--config", missing), "no such config file", str(missing))
    assert_user_error(cli("compile", GPT2, "--config", missing, "-o", out_dir / "m.onnx"), "no such config file",
                      left_empty=out_dir)


@pytest.mark.parametrize("command", ["check", "inspect", "compile", "run"])
def test_entry_that_does_not_exist(cli: Cli, out_dir: Path, command: str) -> None:
    extra = {"compile": ["-o", out_dir / "m.onnx"], "run": ["--input", "x=[[1]]", "-o", out_dir / "y.npz"]}
    assert_user_error(cli(command, GPT2, *SMALL_GPT2, "--entry", "Nope", *extra.get(command, [])),
                      "no algorithm 'Nope'", left_empty=out_dir)


@pytest.mark.parametrize("backend", ["numpy", "onnx"])
def test_a_sequence_longer_than_ell_max_is_a_user_error(cli: Cli, out_dir: Path, backend: str) -> None:
    too_long = json.dumps([list(range(TINY["ell_max"] + 1))])
    assert_user_error(cli("run", GPT2, *SMALL_GPT2, "--backend", backend, "--input", f"x={too_long}",
                          "-o", out_dir / "y.npz"), f"at most {TINY['ell_max']}", left_empty=out_dir)
