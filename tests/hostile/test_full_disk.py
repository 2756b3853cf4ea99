"""Kind: every writer on a full disk says which file and "no space left on device", exits 1, and leaves nothing.

The disk is filled without root: the child process runs under a file-size limit (RLIMIT_FSIZE, `ulimit -f`) with
SIGXFSZ ignored, so a write past it fails with EFBIG, which pseudoformer treats as ENOSPC (atomic_write.describe).
Each writer — compile -o (ONNX and TVM, whose linker's objects are written by LLVM, which exits on a write it cannot
finish), --genai-folder, run -o, inspect -o, generate's temporary models, train -o (with its hf/ export, and the
step's temporary model) — must end as one message naming its output, leave no temporary file beside it or in
TMPDIR, and leave a file it would have replaced as it was."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile.conftest import GPT2, SMALL_GPT2
from tests.training import torch_cases
from tests.training.tiny_train import LOSS, TINY, token_stream

LIMIT = 200  # bytes: a lock file is empty, and every output is bigger
CHILD = f"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from pseudoformer.cli import main
resource.setrlimit(resource.RLIMIT_FSIZE, ({LIMIT}, {LIMIT}))
sys.exit(main(sys.argv[1:]))
"""


def _writers(tmp_path: Path, out: Path) -> dict[str, tuple[list[str | Path], str]]:
    """Each writer's command line, and the name its message must give."""
    ids = token_stream(tmp_path)
    train = ["train", LOSS, "--data", ids, "--seq-len", "8", "--batch-size", "2", "--steps", "1", "--lr", "1e-3"]
    return {
        "compile": (["compile", GPT2, *SMALL_GPT2, "-o", out / "m.onnx"], "m.onnx"),
        "compile tvm": (["compile", GPT2, *SMALL_GPT2, "--backend", "tvm", "-o", out / "m.so"], "m.so"),
        "genai folder": (["compile", GPT2, "--weights", tmp_path / "hf", "--genai-folder", out / "g"], "g"),
        "run": (["run", GPT2, *SMALL_GPT2, "--input", "x=[[1, 2]]", "-o", out / "y.npz"], "y.npz"),
        "inspect": (["inspect", GPT2, *SMALL_GPT2, "--format", "json", "-o", out / "g.json"], "g.json"),
        "generate": (["generate", GPT2, *SMALL_GPT2, "--prompt-ids", "1 2", "--max-new-tokens", "2"], ".onnx"),
        "train": ([*train, *TINY, "--backend", "numpy", "-o", out / "run"], "run/model.safetensors"),
        "train hf": ([*train, "--weights", tmp_path / "hf", "--backend", "numpy", "-o", out / "run"], "run/"),
        "train step": ([*train, *TINY, "-o", out / "run"], "step.onnx"),  # onnxruntime's step, from a file
    }


def _files(folder: Path) -> list[str]:
    """Every file and link under `folder` (directories a command made, empty, are no output)."""
    return sorted(str(Path(root, n).relative_to(folder)) for root, dirs, names in os.walk(folder)
                  for n in [*names, *(d for d in dirs if Path(root, d).is_symlink())])


@pytest.mark.parametrize("writer", ["compile", "compile tvm", "genai folder", "run", "inspect", "generate", "train",
                                    "train hf", "train step"])
def test_a_full_disk_is_one_message_and_leaves_nothing(writer: str, tmp_path: Path) -> None:
    if writer == "compile tvm" and importlib.util.find_spec("tvm") is None:
        pytest.skip("TVM is not installed (pip install pseudoformer[tvm])")
    if "hf" in writer or "genai" in writer:
        torch_cases.gpt2(tmp_path / "hf")
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    tmp.mkdir()
    argv, name = _writers(tmp_path, out)[writer]
    old = out / "m.onnx"  # a file compile would replace: kept as it was
    if writer == "compile":
        old.write_bytes(b"the previous model")
    r = subprocess.run([sys.executable, "-c", CHILD, *map(str, argv)], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "TMPDIR": str(tmp)})
    assert r.returncode == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr[-3000:]
    errors = [line for line in r.stderr.splitlines() if re.match(r"(\S+: )?error: ", line)]
    assert len(errors) == 1 and "no space left on device" in errors[0] and name in errors[0], r.stderr[-3000:]
    assert _files(out) == (["m.onnx"] if writer == "compile" else []), _files(out)
    assert [n for n in _files(tmp) if n != ".ses"] == [], _files(tmp)  # .ses: importing onnxruntime writes it
    if writer == "compile":
        assert old.read_bytes() == b"the previous model"
