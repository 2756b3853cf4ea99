"""The wheel ships the grammar and the models inside `pseudoformer`, and nothing at top level but it."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    # From a clean copy: setuptools reuses a build/ folder it finds, which would hide a module that
    # the package list no longer ships.
    src = tmp_path_factory.mktemp("src") / "pseudoformer"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info",
                                                             "__pycache__", ".pytest_cache", ".ruff_cache", "shared"))
    # No build isolation: the build must not reach the network; setuptools comes with the venv.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(src)], check=True, capture_output=True)
    (whl,) = out.glob("pseudoformer-*.whl")
    return zipfile.ZipFile(whl)


def test_only_pseudoformer_at_top_level(wheel: zipfile.ZipFile) -> None:
    tops = {n.split("/")[0] for n in wheel.namelist() if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"pseudoformer"}


@pytest.mark.parametrize("member", [
    "pseudoformer/grammars/alg.lark",
    "pseudoformer/frontend/entry.py",
    "pseudoformer/ir/interpreter.py",
    "pseudoformer/models/gpt2.alg",
    "pseudoformer/models/gpt2.toml",
    "pseudoformer/models/bert.alg",
    "pseudoformer/models/variants.alg",
    "pseudoformer/models/paper/primitives.alg",
    "pseudoformer/models/paper/dtransformer.alg",
])
def test_wheel_contains(wheel: zipfile.ZipFile, member: str) -> None:
    assert member in wheel.namelist()


def test_every_model_file_is_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    for f in (ROOT / "models").rglob("*"):
        if f.suffix in (".alg", ".toml"):
            assert f"pseudoformer/models/{f.relative_to(ROOT / 'models').as_posix()}" in names


def test_console_script(wheel: zipfile.ZipFile) -> None:
    ep = next(n for n in wheel.namelist() if n.endswith("entry_points.txt"))
    assert "pseudoformer = pseudoformer.cli:main" in wheel.read(ep).decode()


def test_every_module_of_the_source_folders_is_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    """A subpackage missing from pyproject's package list would install without its modules."""
    folders = {"pseudoformer": "pseudoformer", "frontend": "pseudoformer/frontend", "ir": "pseudoformer/ir",
               "passes": "pseudoformer/passes", "backends": "pseudoformer/backends"}
    names = set(wheel.namelist())
    missing = [f"{target}/{f.relative_to(ROOT / folder).as_posix()}" for folder, target in folders.items()
               for f in (ROOT / folder).rglob("*.py")]
    missing = [m for m in missing if m not in names]
    assert not missing, missing


def test_an_installed_wheel_registers_every_op_and_lowering(wheel: zipfile.ZipFile, tmp_path: Path) -> None:
    """Op families and lowerings are found by listing their packages (pseudoformer/base/submodules.py), not by a
    hand-kept import list: installed from the wheel (not editable), every one must still register."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(target),
                    wheel.filename], check=True, capture_output=True)
    with_tvm = importlib.util.find_spec("tvm") is not None  # TVM is optional (pseudoformer[tvm])
    probe = (
        "import pathlib, pseudoformer.ir.ops as ops\n"
        "from pseudoformer.backends.onnx.lowerings import LOWERINGS as onnx\n"
        f"assert pathlib.Path(ops.__file__).is_relative_to({str(target)!r}), ops.__file__\n"
        "print(len(ops.OPS), len(ops.Op), len(onnx))\n"
    )
    if with_tvm:
        probe += "from pseudoformer.backends.tvm.lowerings import LOWERINGS as tvm\nprint(len(tvm))\n"
    # The installed copy comes first on the path, ahead of the editable install of the source tree.
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True, env=env, cwd=tmp_path)
    from pseudoformer.backends.onnx.lowerings import LOWERINGS as onnx_here
    from pseudoformer.ir.ops import Op

    want = [len(Op), len(Op), len(onnx_here)]
    if with_tvm:
        from pseudoformer.backends.tvm.lowerings import LOWERINGS as tvm_here

        want.append(len(tvm_here))
    assert out.stdout.split() == [str(n) for n in want]
