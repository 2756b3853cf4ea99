"""Kind 3: outputs are written as sets, as `cp` would replace a file, after checks made before any work.

The probes attack what atomic_write.py promises: a set of files split between a link and its target,
a replaced file's mode, owner and hard links, a live writer's temporary files (in another PID
namespace, where our PIDs mean nothing), an output that is a directory or one of the inputs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

import pseudoformer
from pseudoformer.backends.onnx.save import data_path, save_model
from pseudoformer.base.atomic_write import write_atomic
from pseudoformer.deploy import run_onnx
from pseudoformer.weights import save_weights
from tests.hostile.conftest import GPT2, SMALL_GPT2, judge, run_cli


def _small_model() -> onnx.ModelProto:
    """Small, but with weights of more than 1 KiB, which save_model puts in the .data file."""
    sizes = [*SMALL_GPT2[3::2], "d_e=32", "d_mlp=64", "N_V=32", "d_attn=16", "d_mid=16"]
    return pseudoformer.compile(GPT2, config=os.devnull, defines=sizes, opt_level=0).onnx


def test_a_model_with_external_data_through_a_symlinked_o_stays_one_set(tmp_path: Path) -> None:
    real, links = tmp_path / "real", tmp_path / "links"
    real.mkdir()
    links.mkdir()
    (links / "model.onnx").symlink_to(real / "stored.onnx")
    save_model(_small_model(), links / "model.onnx", external_threshold=0)  # as a >2 GiB model is saved
    assert sorted(p.name for p in real.iterdir()) == ["stored.onnx", "stored.onnx.data"]
    assert sorted(p.name for p in links.iterdir()) == ["model.onnx"] and (links / "model.onnx").is_symlink()
    locations = {e.value for t in onnx.load(real / "stored.onnx", load_external_data=False).graph.initializer
                 for e in t.external_data if e.key == "location"}
    assert locations == {"stored.onnx.data"}
    out = run_onnx(links / "model.onnx", {"x": np.array([[1, 2]])})  # through the link, as `run` is given it
    assert np.isfinite(out["Y"]).all()


def test_the_set_is_renamed_with_the_naming_part_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pseudoformer.base.atomic_write as aw

    order: list[str] = []
    real_replace = os.replace

    def spy(src: object, dst: object) -> None:
        if not str(dst).endswith(".lock"):
            order.append(Path(str(dst)).name)
        real_replace(src, dst)

    monkeypatch.setattr(aw.os, "replace", spy)
    save_model(_small_model(), tmp_path / "m.onnx", external_threshold=0)
    assert order == ["m.onnx.data", "m.onnx"]


def test_a_0600_file_stays_0600_and_its_hard_links_stay(tmp_path: Path) -> None:
    private = tmp_path / "private.bin"
    private.write_bytes(b"old")
    private.chmod(0o600)
    write_atomic(private, lambda f: f.write(b"new"))
    assert private.read_bytes() == b"new" and private.stat().st_mode & 0o777 == 0o600
    linked = tmp_path / "linked.bin"
    linked.write_bytes(b"old")
    os.link(linked, tmp_path / "other-name.bin")
    write_atomic(linked, lambda f: f.write(b"new"))
    assert (tmp_path / "other-name.bin").read_bytes() == b"new" and linked.stat().st_nlink == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["linked.bin", "other-name.bin", "private.bin"]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user takes root")
def test_the_owner_of_a_replaced_file_stays(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs.npz"
    theirs.write_bytes(b"old")
    os.chown(theirs, 4321, 4321)
    write_atomic(theirs, lambda f: f.write(b"new"))
    st = theirs.stat()
    assert (st.st_uid, st.st_gid) == (4321, 4321) and theirs.read_bytes() == b"new"


_WRITER = textwrap.dedent("""
    import sys, time
    from pseudoformer.base.atomic_write import write_atomic
    def write(f):
        f.write(b"partial")
        f.flush()
        print("writing", flush=True)
        time.sleep(120)
    write_atomic(sys.argv[1], write)
""")


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--pid", "--fork", "true"], capture_output=True,
                          timeout=30, check=False)
    return done.returncode == 0


@pytest.mark.parametrize("namespace", ["another PID namespace", "another process holding the lock"])
def test_a_live_writers_temporary_file_survives_our_sweep(namespace: str, tmp_path: Path) -> None:
    """A writer whose PID, seen from here, is a stranger's (or nobody's): the sweep must judge by its lock."""
    target = tmp_path / "model.onnx"
    unshare = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child"]
    prefix = unshare if namespace.startswith("another PID") else []
    if prefix and not _unshare_works():
        pytest.skip("unshare is not allowed here; the lock-holder row covers the same rule")
    writer = subprocess.Popen([*prefix, sys.executable, "-c", _WRITER, str(target)], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
        live = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        assert len(live) == 1 and (not prefix or ".pseudoformer-" in live[0].name)
        write_atomic(tmp_path / "model.onnx", lambda f: f.write(b"ours"))  # sweeps the directory first
        write_atomic(tmp_path / "other.onnx", lambda f: f.write(b"ours"))
        assert live[0].exists(), "the sweep deleted a live writer's temporary file"
    finally:
        writer.kill()
        writer.wait()
    # The writer is gone now (its namespace's init dies with unshare, a moment later): provably dead.
    for _ in range(100):
        write_atomic(tmp_path / "third.onnx", lambda f: f.write(b"ours"))
        if not live[0].exists():
            break
        time.sleep(0.1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "other.onnx", "third.onnx"]


def test_an_output_directory_is_refused_before_any_work(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.alg"
    broken.write_text("Algorithm: y ← F(x\n", encoding="utf-8")  # parsing it would be an error of its own
    for argv in (["compile", broken, "-o", tmp_path], ["run", broken, "--input", "x=[1]", "-o", tmp_path],
                 ["inspect", broken, "-o", tmp_path]):
        judge(run_cli(argv, capfd), "it is a directory")


@pytest.mark.parametrize("which", ["the .alg", "the .alg by a link", "the default .toml", "--config",
                                   "--weights", "--input"])
def test_an_output_that_is_an_input_is_refused(which: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "gpt2.alg"
    shutil.copy(GPT2, src)
    shutil.copy(Path(GPT2).with_suffix(".toml"), tmp_path / "gpt2.toml")
    weights = tmp_path / "w.safetensors"
    save_weights(pseudoformer.load(GPT2, config=os.devnull, defines=SMALL_GPT2[3::2]).weights, weights)
    x = tmp_path / "x.npy"
    np.save(x, np.array([[1, 2]]))
    (tmp_path / "alias.npz").symlink_to(src)
    out = {"the .alg": src, "the .alg by a link": tmp_path / "alias.npz", "the default .toml": tmp_path / "gpt2.toml",
           "--config": tmp_path / "c.toml", "--weights": weights, "--input": x}[which]
    (tmp_path / "c.toml").write_text("[hyperparameters]\n", encoding="utf-8")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    small = SMALL_GPT2 if which != "the default .toml" else SMALL_GPT2[2:]
    argv = ["run", src, *small, "--weights", weights, "--input", f"x={x}", "-o", out]
    if which == "--config":
        argv = ["run", src, *SMALL_GPT2[2:], "--config", tmp_path / "c.toml", "--input", f"x={x}", "-o", out]
    judge(run_cli(argv, capfd), "which this command reads")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_a_companion_that_is_an_input_is_refused(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    weights = data_path(tmp_path / "m.onnx")  # the .data file `compile -o m.onnx` may write
    save_weights(pseudoformer.load(GPT2, config=os.devnull, defines=SMALL_GPT2[3::2]).weights, weights)
    before = weights.read_bytes()
    judge(run_cli(["compile", GPT2, *SMALL_GPT2, "--weights", weights, "-o", tmp_path / "m.onnx"], capfd),
          "(with m.onnx.data): it is --weights")
    assert weights.read_bytes() == before and not (tmp_path / "m.onnx").exists()


def test_run_of_an_onnx_cannot_write_over_its_own_data(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "m.onnx"
    save_model(_small_model(), model, external_threshold=0)
    data = data_path(model)
    before = data.read_bytes()
    judge(run_cli(["run", model, "--input", "x=[[1]]", "-o", data], capfd), "it is the model's weights")
    assert data.read_bytes() == before
