"""Generation's temporary ONNX files: removed however the process ends, and refused up front on a full disk."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pseudoformer.base.errors import UsageError
from pseudoformer.generation import onnx_files

HOLD = """
import time
from pseudoformer.generation.onnx_files import OnnxFiles
files = OnnxFiles()
print(files.directory, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_terminated_generation_leaves_no_files(tmp_path: Path, sig: signal.Signals) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.stdout is not None
    directory = Path(proc.stdout.readline().strip())
    assert directory.is_dir() and directory.parent == tmp_path
    proc.send_signal(sig)
    proc.wait(timeout=60)
    assert list(tmp_path.iterdir()) == []


def test_the_files_go_with_their_owner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(onnx_files.tempfile, "tempdir", None)
    files = onnx_files.OnnxFiles()
    assert files.directory.parent == tmp_path
    del files
    assert list(tmp_path.iterdir()) == []


def test_no_room_for_the_weights_is_refused_with_the_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    class Lowered:
        nbytes = 5 << 30

    free = type("Usage", (), {"free": 1 << 30})()
    monkeypatch.setattr(onnx_files.shutil, "disk_usage", lambda p: free)
    files = onnx_files.OnnxFiles()
    with pytest.raises(UsageError, match=r"needs 5.0 GiB .* has 1.0 GiB free .*TMPDIR"):
        files.write("step", Lowered())
    assert list(files.directory.iterdir()) == []


def test_generate_keeps_no_weights_of_its_own_once_onnxruntime_has_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """A generator told it owns the model (`generate` loads one only to generate) drops every array the
    model and its passes held once the session's file is written, before onnxruntime loads it: weakly
    referenced here, they are gone when the session is made; the tokens are those of a generator that
    keeps them."""
    import gc
    import weakref

    import pseudoformer
    from pseudoformer.backends.onnx import runner
    from pseudoformer.generation import Generator
    from tests.cli.test_cli import GPT2, TINY

    alive_at_load: list[int] = []
    make = runner.OnnxRunner.__init__

    def counting(self: object, *args: object, **kw: object) -> None:
        gc.collect()
        alive_at_load.append(sum(r() is not None for r in arrays))
        make(self, *args, **kw)

    monkeypatch.setattr(runner.OnnxRunner, "__init__", counting)

    def model() -> pseudoformer.Model:
        return pseudoformer.load(GPT2, config=os.devnull, defines=[f"{k}={v}" for k, v in TINY.items()])

    owned = model()
    arrays = [weakref.ref(a) for a in owned.weights.values()]
    lean = Generator(owned, keep_weights=False)
    assert arrays and alive_at_load == [0]
    assert owned.weights == {} and lean.weights == {}
    full = Generator(model())
    assert full.model.weights  # the caller's model is left as it was
    for g in (lean, full):
        g.tokens = g.generate([1, 2, 3], max_new_tokens=4, sampling=None, seed=0).tokens
    assert lean.tokens == full.tokens
