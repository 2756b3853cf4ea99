"""Deploying with TVM: a .so that loads in a fresh process, the CLI, and the errors a user can make."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from tvm_util import BACKENDS  # noqa: F401  (skips this module without TVM)

from pseudoformer.backends.tvm import compile_graph, load_model
from pseudoformer.backends.tvm.build import weights_path
from pseudoformer.base.errors import UsageError
from pseudoformer.cli import main
from pseudoformer.deploy import compile
from pseudoformer.model import load

ROOT = Path(__file__).resolve().parents[3]
TINY = ["L=1", "H=2", "d_e=16", "d_mlp=32", "d_attn=8", "d_mid=8", "ell_max=32", "N_V=50", "eps=1e-5"]
X = np.array([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])


def _defines() -> list[str]:
    return [a for d in TINY for a in ("-D", d)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    """GPT-2 compiled by the API and saved; and what the interpreter says for X."""
    compiled = compile("gpt2", config=os.devnull, defines=TINY, backend="tvm")
    path = compiled.save(tmp_path_factory.mktemp("so") / "gpt2.so")
    return path, compiled.model.run(x=X)


def _fresh_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          env=env, timeout=300, check=False)


def test_a_saved_library_loads_and_runs_in_a_fresh_process(saved: tuple, tmp_path: Path) -> None:
    path, want = saved
    assert weights_path(path).is_file() and path.stat().st_size < 5 * 2**20
    out = tmp_path / "y.npy"
    done = _fresh_python("""
        import sys
        import numpy as np
        from pseudoformer.backends.tvm import load_model
        model = load_model(sys.argv[1])
        y = model.run({"x": np.array([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])})["Y"]
        np.save(sys.argv[2], y)
    """, str(path), str(out))
    assert done.returncode == 0, done.stderr
    assert "Scope" not in done.stderr  # TVM's save/load chatter stays out of the user's terminal
    assert np.abs(np.load(out) - want["Y"]).max() <= 1e-4


def test_the_library_describes_itself(saved: tuple) -> None:
    path, _ = saved
    model = load_model(path)
    assert model.input_names == ["x"] and model.output_names == ["Y"]
    assert model.meta["entry"] == "GPT2" and model.meta["target"] == "llvm"
    assert json.loads(model.meta["hyperparameters"])["d_e"] == 16


def test_a_library_without_its_weights_file_is_a_clear_error(saved: tuple, tmp_path: Path) -> None:
    path, _ = saved
    lonely = tmp_path / "lonely.so"
    lonely.write_bytes(path.read_bytes())
    manifest = json.loads(path.with_name(f"{path.stem}.manifest.json").read_text(encoding="utf-8"))
    manifest["files"] = {"lonely.so": manifest["files"][path.name]}  # the library's own manifest, renamed with it
    (tmp_path / "lonely.manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(Exception, match="lonely.weights.safetensors"):
        load_model(lonely)


def test_weights_bound_as_constants_make_one_self_contained_file(tmp_path: Path) -> None:
    m = load("gpt2", config=os.devnull, defines=TINY)
    compiled = compile_graph(m.graph, m.weights, tvm_params="bind")
    path = compiled.save(tmp_path / "bound.so")
    assert not weights_path(path).exists()
    assert np.abs(load_model(path).run({"x": X})["Y"] - m.run(x=X)["Y"]).max() <= 1e-4


def test_cli_compile_then_run_the_so_and_the_alg(saved: tuple, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    _, want = saved
    so = tmp_path / "m.so"
    assert main(["compile", "gpt2", "--config", os.devnull, *_defines(), "--backend", "tvm", "-o", str(so)]) == 0
    assert f"wrote {so}" in capsys.readouterr().err
    x = json.dumps(X.tolist())
    assert main(["run", str(so), "--input", f"x={x}", "-o", str(tmp_path / "a.npz")]) == 0
    assert main(["run", "gpt2", "--config", os.devnull, *_defines(), "--backend", "tvm", "--input", f"x={x}",
                 "-o", str(tmp_path / "b.npz")]) == 0
    for name in ("a.npz", "b.npz"):
        assert np.abs(np.load(tmp_path / name)["Y"] - want["Y"]).max() <= 1e-4


def test_cli_compile_with_bound_weights_runs_in_a_fresh_process_without_a_weights_file(
        saved: tuple, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, want = saved
    so = tmp_path / "bound.so"
    assert main(["compile", "gpt2", "--config", os.devnull, *_defines(), "--backend", "tvm", "--tvm-params", "bind",
                 "-o", str(so)]) == 0
    assert "weights bound into the library" in capsys.readouterr().err
    # One library and its manifest (pseudoformer/base/manifest.py), which `run` checks before loading it.
    assert so.is_file() and not weights_path(so).exists()
    assert sorted(tmp_path.iterdir()) == [tmp_path / "bound.manifest.json", so]
    elsewhere = tmp_path / "elsewhere"  # alone in its folder with its manifest: no weights to find beside it
    elsewhere.mkdir()
    manifest = json.loads((tmp_path / "bound.manifest.json").read_text(encoding="utf-8"))
    manifest["files"] = {"model.so": manifest["files"]["bound.so"]}
    (elsewhere / "model.manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    so = so.rename(elsewhere / "model.so")
    assert load_model(so).meta["param_mode"] == "bind"
    x = json.dumps(X.tolist())
    done = _fresh_python("""
        import sys
        from pseudoformer.cli import main
        sys.exit(main(sys.argv[1:]))
    """, "run", str(so), "--input", f"x={x}", "-o", str(tmp_path / "y.npz"))
    assert done.returncode == 0, done.stderr
    assert np.abs(np.load(tmp_path / "y.npz")["Y"] - want["Y"]).max() <= 1e-4


def test_cli_compile_passes_weights_as_arguments_by_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    so = tmp_path / "m.so"
    assert main(["compile", "gpt2", "--config", os.devnull, *_defines(), "--backend", "tvm", "--tvm-params", "args",
                 "-o", str(so)]) == 0
    assert f"weights in {weights_path(so)}" in capsys.readouterr().err
    assert load_model(so).meta["param_mode"] == "args"
    with pytest.raises(SystemExit) as exit_:
        main(["compile", "gpt2", "--backend", "tvm", "--tvm-params", "const", "-o", str(so)])
    assert exit_.value.code == 1 and "invalid choice: 'const'" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["compile", "gpt2", "--backend", "tvm", "--target", "cuda"], "cuda"),
    (["compile", "gpt2", "--backend", "tvm", "--dtype", "bfloat16"], "dtype"),
    (["compile", "gpt2", "--target", "cuda"], "tvm backend"),
    (["compile", "gpt2", "--tvm-params", "bind"], "--tvm-params is for the tvm backend"),
])
def test_cli_compile_mistakes_exit_1(argv: list[str], message: str, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    if "cuda" in argv and "--backend" in argv:
        import tvm

        if tvm.cuda().exist:
            pytest.skip("this machine has a GPU")
    assert main([*argv, "--config", os.devnull, *_defines(), "-o", str(tmp_path / "m.so")]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "m.so").exists()


def test_cli_run_mistakes_exit_1(saved: tuple, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = saved
    out = str(tmp_path / "o.npz")
    assert main(["run", str(path), "--input", "x=[[1, 2, 50]]", "-o", out]) == 1
    assert "out of range" in capsys.readouterr().err
    assert main(["run", str(path), "--input", "y=[[1, 2]]", "-o", out]) == 1
    assert "missing ['x']" in capsys.readouterr().err
    assert main(["run", str(path), "--backend", "onnx", "--input", "x=[[1]]", "-o", out]) == 1
    assert "tvm backend" in capsys.readouterr().err
    with pytest.raises(UsageError, match="out of range"):
        compile("gpt2", config=os.devnull, defines=TINY, backend="tvm").run(x=np.array([[60]]))


def test_without_tvm_the_backend_says_how_to_install_it(tmp_path: Path) -> None:
    done = _fresh_python("""
        import sys
        sys.modules["tvm"] = None  # what an environment without apache-tvm looks like to an import
        from pseudoformer.cli import main
        sys.exit(main(sys.argv[1:]))
    """, "compile", "gpt2", "--config", os.devnull, *_defines(), "--backend", "tvm", "-o", str(tmp_path / "m.so"))
    assert done.returncode == 1
    assert "install pseudoformer[tvm]" in done.stderr and "Traceback" not in done.stderr


def test_float16_compiles_and_matches_float32_within_half_precision() -> None:
    """The float16 pass (passes/float16.py) runs in the TVM pipeline too: weights are stored in fp16."""
    defines = list(TINY)
    half = compile("gpt2", config=os.devnull, defines=defines, backend="tvm", dtype="float16", seed=3)
    full = load("gpt2", config=os.devnull, defines=defines, seed=3)
    x = np.random.default_rng(0).integers(0, 11, (2, 7))
    got, want = half.run(x=x)["Y"], full.run(x=x)["Y"]
    assert got.dtype == np.float16
    assert {str(w.dtype) for w in half.compiled.weights.values()} == {"float16"}
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=2e-2)
    assert not np.allclose(got.astype(np.float32), want, rtol=1e-6, atol=1e-6)  # it did compute in half
