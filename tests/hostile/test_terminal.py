"""Kind 5: no string from input reaches the terminal raw.

Tensor names from a safetensors header, config keys, paths, source lines and decoded tokens are each
given an OSC window-title sequence, a screen clear, a carriage return and a newline that would forge a
second `error:` line. What is printed must hold none of them raw, and exactly one line may start `error:`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import pseudoformer
from pseudoformer.weights import save_weights
from tests.hostile.conftest import GPT2, RAW_CONTROL, SMALL_GPT2, judge, run_cli

EVIL = "\x1b]0;pwned\x07\x1b[2J\rok\nerror: forged line\u202e"


def test_tensor_names_from_a_safetensors_file(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    weights = dict(pseudoformer.load(GPT2, config=os.devnull, defines=SMALL_GPT2[3::2]).weights)
    weights[f"W_e{EVIL}"] = weights.pop("W_e")  # an unexpected name, and W_e missing
    path = tmp_path / "evil.safetensors"
    save_weights(weights, path)
    r = run_cli(["run", GPT2, *SMALL_GPT2, "--weights", path, "--input", "x=[[1]]", "-o", tmp_path / "y.npz"], capfd)
    judge(r, "\\x1b]0;pwned\\x07")


def test_a_config_key_from_a_toml(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    key = json.dumps(EVIL)  # a TOML basic string takes JSON's escapes: \u001b, \n, \r
    toml = tmp_path / "c.toml"
    toml.write_text(f"[hyperparameters]\n{key} = 1\n", encoding="utf-8")
    r = run_cli(["run", GPT2, "--config", toml, *SMALL_GPT2[2:], "--input", "x=[[1]]", "-o", tmp_path / "y.npz"],
                capfd)
    judge(r, "unknown hyperparameter \\x1b]0;pwned")


def test_a_config_json_key(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"model_type": f"gpt2{EVIL}"}), encoding="utf-8")
    judge(run_cli(["compile", GPT2, "--weights", ckpt, "-o", tmp_path / "m.onnx"], capfd), "is not supported")


def test_a_path_named_with_escapes(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    judge(run_cli(["check", str(tmp_path / f"missing{EVIL}.alg")], capfd), "missing\\x1b]0;pwned")


def test_a_source_line_quoted_under_a_diagnostic(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "m.alg"
    src.write_text("Algorithm: y ← F(x)\n  Input: x ∈ ℝ^{d}\n  Output: y ∈ ℝ^{d}\n"
                   "  1 return y = \x1b[2J\x1b]0;pwned\x07 x\n", encoding="utf-8")
    r = run_cli(["check", src, "-D", "d=2"], capfd)
    assert r.code == 1 and "\\x1b[2J" in r.err and not RAW_CONTROL.search(r.err), repr(r.err)


def test_decoded_tokens_on_stdout(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from tokenizers import Tokenizer, models

    vocab = {f"\x1b]0;tok{i}\x07\x1b[2J": i for i in range(11)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=next(iter(vocab))))
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    r = run_cli(["generate", GPT2, *SMALL_GPT2, "-D", "ell_gen=2", "--backend", "numpy", "--prompt-ids", "1",
                 "--tokenizer", path], capfd)
    assert r.code == 0, r.err
    assert "\\x1b]0;tok" in r.out and not RAW_CONTROL.search(r.out), repr(r.out)


def test_an_npz_name_reported_after_a_run(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "y\x1b[2J.npz"
    r = run_cli(["run", GPT2, *SMALL_GPT2, "--input", "x=[[1]]", "-o", out], capfd)
    assert r.code == 0 and "wrote" in r.err and not RAW_CONTROL.search(r.err), repr(r.err)
    assert np.load(out)["Y"].shape == (1, 1, 11)


@pytest.mark.parametrize("argv", [["check", GPT2, f"--bogus{EVIL}"], ["check", GPT2, "--max-nodes", EVIL],
                                  ["run", GPT2, "--input", f"x{EVIL}", "-o", "y.npz"]])
def test_a_command_line_argument_quoted_back(argv: list[str], tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = run_cli(argv, capfd)
    assert r.code == 1 and not RAW_CONTROL.search(r.err), repr(r.err)
    assert not any(line.startswith("error: forged") for line in r.err.splitlines()), r.err
