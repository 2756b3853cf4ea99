"""Kind 1: no input reaches a traceback or the internal-error path; the one exit path of main() is real.

The probes are what a second prober found, each as a kind: a loop of links where a path is resolved,
an empty sequence, a Rust panic from a hostile tokenizer (a BaseException, not an Exception), and the
exit path itself, fed an exception of each family, so that a new kind of failure still ends in one
message and never a traceback.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import pseudoformer.cli
from tests.hostile.conftest import GPT2, LLAMA, SMALL_GPT2, SMALL_LLAMA, judge, run_cli

BLOCK = "Algorithm: y ← F(x)\n  Input: x ∈ ℝ^{d}\n  Output: y ∈ ℝ^{d}\n  1 return y = x\n"


def test_a_use_of_a_loop_of_links_is_a_located_diagnostic(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.alg").symlink_to("b.alg")
    (tmp_path / "b.alg").symlink_to("a.alg")
    src = tmp_path / "m.alg"
    src.write_text('use "a.alg"\n' + BLOCK, encoding="utf-8")
    judge(run_cli(["check", src], capfd), "m.alg:1:5: error: `use 'a.alg'`: Too many levels of symbolic links")


def test_an_entry_file_that_is_a_loop_of_links(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.alg").symlink_to("b.alg")
    (tmp_path / "b.alg").symlink_to("a.alg")
    judge(run_cli(["check", tmp_path / "a.alg"], capfd), "a.alg")


@pytest.mark.parametrize("model,small", [(GPT2, SMALL_GPT2), (LLAMA, SMALL_LLAMA)])
@pytest.mark.parametrize("backend", ["numpy", "onnx"])
def test_an_empty_sequence_is_refused_on_every_backend(model: str, small: list[str], backend: str, tmp_path: Path,
                                                       capfd: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "x.npy"
    np.save(empty, np.zeros((1, 0), dtype=np.int64))
    r = run_cli(["run", model, *small, "--backend", backend, "--input", f"x={empty}", "-o", tmp_path / "y.npz"],
                capfd)
    judge(r, "an empty sequence has nothing to compute on")
    assert not (tmp_path / "y.npz").exists()


def _backtracking_tokenizer(path: Path) -> None:
    """A tokenizer.json whose pre-tokenizer regex backtracks until onig gives up, which tokenizers turns
    into a Rust panic (pyo3's PanicException, a BaseException)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(11)} | {"[UNK]": 10}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("(a+)+b"), "isolated")
    tok.save(str(path))


def test_a_rust_panic_in_the_tokenizer_is_one_message(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    tok = tmp_path / "tokenizer.json"
    _backtracking_tokenizer(tok)
    r = run_cli(["generate", GPT2, *SMALL_GPT2, "-D", "ell_gen=2", "--tokenizer", tok,
                 "--prompt", "a" * 5000 + "c"], capfd)
    judge(r, f"tokenizer {tok} failed: PanicException")
    assert "backtrace" not in r.err


class _Foreign(BaseException):
    """Not an Exception, as a pyo3 PanicException is not."""


# MemoryError is not here: it is the user's limit, one message and exit 1 (test_undefined_outputs.py).
@pytest.mark.parametrize("exc", [RuntimeError("boom"), _Foreign("panic"), RecursionError(),
                                 OSError("no filename"), ValueError("\x1b]0;owned\x07\nerror: forged")])
def test_whatever_escapes_a_command_is_an_internal_error_with_a_report_hint(
        exc: BaseException, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    def explode(args: object) -> int:
        raise exc

    monkeypatch.setattr(pseudoformer.cli, "_check", explode)
    r = run_cli(["check", GPT2], capfd)
    assert r.code == 2, r.err
    assert "pseudoformer: internal error:" in r.err and "please report it" in r.err, r.err
    assert "Traceback" not in r.err and "\x1b" not in r.err
    assert not any(line.startswith("error:") for line in r.err.splitlines()), r.err


def test_interrupt_still_ends_as_an_interrupt(monkeypatch: pytest.MonkeyPatch,
                                             capfd: pytest.CaptureFixture[str]) -> None:
    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(pseudoformer.cli, "_check", interrupted)
    assert run_cli(["check", GPT2], capfd).code == 130


def test_a_shard_index_naming_a_loop_of_links(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 1, "n_embd": 8, "n_head": 2,
                                                  "vocab_size": 11, "n_positions": 6}), encoding="utf-8")
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"wte.weight": "a.safetensors"}}),
                                                       encoding="utf-8")
    os.symlink("b.safetensors", ckpt / "a.safetensors")
    os.symlink("a.safetensors", ckpt / "b.safetensors")
    r = run_cli(["run", GPT2, "--weights", ckpt, "--input", "x=[[1]]", "-o", tmp_path / "y.npz"], capfd)
    assert r.code == 1 and "Traceback" not in r.err and "internal error" not in r.err, r.err
