"""Generation's temporary ONNX files: removed however the process ends, and refused up front on a full disk."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pseudoformer.errors import UsageError
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
