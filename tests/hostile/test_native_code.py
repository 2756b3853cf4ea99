"""Kind 7: `run model.so` loads nothing before the library's manifest shows pseudoformer wrote it.

Loading a shared library runs its constructors. The probe is a library whose constructor leaves a mark
(a file): whatever `run` says about it, the mark must not appear unless the manifest beside it matches
the library byte for byte and names this TVM. One TVM compile checks that a real library still runs.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.hostile.conftest import GPT2, SMALL_GPT2, judge, run_cli

pytest.importorskip("tvm")
CONSTRUCTOR = """
#include <stdio.h>
__attribute__((constructor)) static void mark(void) {
    FILE *f = fopen("%s", "w");
    if (f) { fputs("constructor ran", f); fclose(f); }
}
"""


@pytest.fixture
def evil(tmp_path: Path) -> tuple[Path, Path]:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the probe library")
    mark = tmp_path / "constructor-ran"
    src = tmp_path / "evil.c"
    src.write_text(CONSTRUCTOR % mark, encoding="utf-8")
    lib = tmp_path / "model.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, timeout=120)
    return lib, mark


def _manifest(lib: Path, tvm_version: str, sha: str | None = None) -> None:
    data = lib.read_bytes()
    doc = {"format": 1, "producer": "pseudoformer", "pseudoformer": "0.1.0", "tvm": tvm_version, "param_mode": "bind",
           "files": {lib.name: {"sha256": sha or hashlib.sha256(data).hexdigest(), "bytes": len(data)}}}
    lib.with_name(f"{lib.stem}.manifest.json").write_text(json.dumps(doc), encoding="utf-8")


def _run(lib: Path, capfd: pytest.CaptureFixture[str]):  # -> Result
    return run_cli(["run", lib, "--input", "x=[[1]]", "-o", lib.with_name("y.npz")], capfd)


def test_a_library_without_a_manifest_is_not_loaded(evil: tuple[Path, Path], capfd: pytest.CaptureFixture[str]) -> None:
    lib, mark = evil
    judge(_run(lib, capfd), "has no manifest model.manifest.json beside it")
    assert not mark.exists(), "the library's constructor ran"


def test_a_library_that_is_not_the_one_its_manifest_lists(evil: tuple[Path, Path],
                                                          capfd: pytest.CaptureFixture[str]) -> None:
    import tvm

    lib, mark = evil
    _manifest(lib, tvm.__version__, sha="0" * 64)
    judge(_run(lib, capfd), "is not the file its manifest lists")
    assert not mark.exists(), "the library's constructor ran"


def test_a_library_of_another_tvm(evil: tuple[Path, Path], capfd: pytest.CaptureFixture[str]) -> None:
    lib, mark = evil
    _manifest(lib, "0.0.1")
    judge(_run(lib, capfd), "was compiled with TVM '0.0.1'")
    assert not mark.exists(), "the library's constructor ran"


@pytest.mark.parametrize("bad", ["not json", '{"format": 1}', '{"producer": "pseudoformer", "format": 1, '
                                 '"files": {}, "tvm": NaN}'])
def test_a_malformed_manifest(bad: str, evil: tuple[Path, Path], capfd: pytest.CaptureFixture[str]) -> None:
    lib, mark = evil
    lib.with_name("model.manifest.json").write_text(bad, encoding="utf-8")
    r = _run(lib, capfd)
    assert r.code == 1 and "internal error" not in r.err and "Traceback" not in r.err, r.err
    assert not mark.exists(), "the library's constructor ran"


def test_a_library_pseudoformer_wrote_runs_and_a_swapped_weights_file_does_not(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    lib = tmp_path / "m.so"
    r = run_cli(["compile", GPT2, *SMALL_GPT2, "--backend", "tvm", "-o", lib], capfd)
    assert r.code == 0, r.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.manifest.json", "m.so", "m.weights.safetensors"]
    assert run_cli(["run", lib, "--input", "x=[[1, 2]]", "-o", tmp_path / "y.npz"], capfd).code == 0
    weights = tmp_path / "m.weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")
    judge(run_cli(["run", lib, "--input", "x=[[1, 2]]", "-o", tmp_path / "y2.npz"], capfd),
          "is not the file its manifest lists")
