"""The wheel ships the grammar and the models inside `pseudoformer`, and nothing at top level but it."""

from __future__ import annotations

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
