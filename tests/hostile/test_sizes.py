"""Kind 2: every input-derived size is bounded before anything is allocated for it.

A model without a position table (Llama's RoPE) has no ℓ_max of its own: its sequences are bounded by
--max-seq-len (limits.MAX_SEQ_LEN). A `.onnx` file from anyone runs under onnxruntime's memory limit,
and its run-time sizes are bounded too. Each probe must be refused in about the time it takes to load
the model: none may allocate what it asks for.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.hostile.conftest import GPT2, LLAMA, SMALL_GPT2, SMALL_LLAMA, judge, run_cli


def _ids(tmp_path: Path, n: int) -> str:
    path = tmp_path / "x.npy"
    np.save(path, np.ones((1, n), dtype=np.int64))
    return f"x={path}"


@pytest.mark.parametrize("backend", ["numpy", "onnx"])
def test_200k_ids_to_a_model_without_a_position_table(backend: str, tmp_path: Path,
                                                      capfd: pytest.CaptureFixture[str]) -> None:
    r = run_cli(["run", LLAMA, *SMALL_LLAMA, "--backend", backend, "--input", _ids(tmp_path, 200_000),
                 "-o", tmp_path / "y.npz"], capfd)
    judge(r, "has seq = 200,000, but the model takes at most 8,192")
    assert "--max-seq-len N raises it" in r.err


def test_max_seq_len_lowers_and_raises_the_bound(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "y.npz"
    judge(run_cli(["run", LLAMA, *SMALL_LLAMA, "--max-seq-len", "4", "--input", _ids(tmp_path, 5), "-o", out],
                  capfd), "at most 4")
    assert run_cli(["run", LLAMA, *SMALL_LLAMA, "--max-seq-len", "5", "--input", _ids(tmp_path, 5), "-o", out],
                   capfd).code == 0
    judge(run_cli(["check", LLAMA, "--max-seq-len", "0"], capfd), "--max-seq-len must be at least 1")


def test_a_model_with_a_position_table_keeps_its_own_bound(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    judge(run_cli(["run", GPT2, *SMALL_GPT2, "--max-seq-len", "100000", "--input", _ids(tmp_path, 7),
                   "-o", tmp_path / "y.npz"], capfd), "at most 6")


@pytest.mark.parametrize("model,small", [(LLAMA, SMALL_LLAMA), (GPT2, SMALL_GPT2)])
def test_generate_a_billion_new_tokens(model: str, small: list[str], capfd: pytest.CaptureFixture[str]) -> None:
    start = time.perf_counter()
    r = run_cli(["generate", model, *small, "-D", "ell_gen=2", "--prompt-ids", "1", "--max-new-tokens",
                 "1000000000", "--backend", "numpy"], capfd)
    judge(r, "1,000,000,000 new ones need 1,000,000,000 positions")
    assert time.perf_counter() - start < 120  # refused up front, not after generating for hours


def _bomb(path: Path, floats: int, with_input: bool = True) -> Path:
    """A model of about 200 bytes whose one node makes `floats` floats: ConstantOfShape."""
    shape = helper.make_node("Constant", [], ["shape"], value=helper.make_tensor("s", TensorProto.INT64, [1], [floats]))
    fill = helper.make_node("ConstantOfShape", ["shape"], ["y"],
                            value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])] if with_input else []
    graph = helper.make_graph([shape, fill], "bomb", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                                           [None])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_200_byte_onnx_cannot_allocate_8_gib(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    bomb = _bomb(tmp_path / "bomb.onnx", 2**31)
    assert bomb.stat().st_size < 300
    r = run_cli(["run", bomb, "--input", "x=[1.0]", "-o", tmp_path / "y.npz"], capfd)
    judge(r, "needs more memory than the")
    assert not (tmp_path / "y.npz").exists()


def test_max_memory_bounds_a_small_allocation_too(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # In a fresh process: the CLI's own path from --max-memory to onnxruntime's arena, with nothing registered before.
    import subprocess
    import sys

    bomb = _bomb(tmp_path / "bomb.onnx", 2**24)  # 64 MiB
    code = "import sys; from pseudoformer.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, "run", str(bomb), "--input", "x=[1.0]", "--max-memory",
                           str(16 << 20), "-o", str(tmp_path / "y.npz")], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 1 and "needs more memory than the 16.0 MiB" in done.stderr, done.stderr
    assert "\x1b" not in done.stderr  # onnxruntime's own coloured log stays off


def test_a_foreign_onnx_input_is_bounded(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    bomb = _bomb(tmp_path / "bomb.onnx", 4)
    x = tmp_path / "x.npy"
    np.save(x, np.ones(100_000, dtype=np.float32))
    judge(run_cli(["run", bomb, "--input", f"x={x}", "-o", tmp_path / "y.npz"], capfd),
          "has n = 100,000, but the model takes at most 8,192")


def test_max_memory_is_only_for_onnx_files(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    judge(run_cli(["run", GPT2, *SMALL_GPT2, "--max-memory", "100", "--input", "x=[[1]]", "-o", tmp_path / "y.npz"],
                  capfd), "--max-memory BYTES (at least 1) is for running a .onnx file")


@pytest.mark.parametrize("location", ["pipe", "/etc/passwd", "../../../../../../../etc/passwd", "zero"])
def test_a_foreign_onnx_whose_external_data_points_anywhere(location: str, tmp_path: Path,
                                                            capfd: pytest.CaptureFixture[str]) -> None:
    """A FIFO would block a reader for ever, /dev/zero never ends, and a path outside the model's directory
    reads what it should not: each is one refusal (onnxruntime's own checks), not a hang or a read."""
    import os

    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "zero").symlink_to("/dev/zero")
    w = helper.make_tensor("w", TensorProto.FLOAT, [4], [0.0] * 4)
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [w])
    model = tmp_path / "m.onnx"
    model.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    start = time.perf_counter()
    r = run_cli(["run", model, "--input", "x=[1.0, 2.0, 3.0, 4.0]", "-o", tmp_path / "y.npz"], capfd)
    judge(r, "onnxruntime could not load the model")
    assert "root:" not in r.err and time.perf_counter() - start < 60


def test_a_foreign_onnx_whose_metadata_is_not_utf8(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Found by the long fuzz run: onnxruntime hands invalid UTF-8 in a name or a metadata value back as a
    UnicodeDecodeError, which was an internal error."""
    model = onnx.load(_bomb(tmp_path / "m.onnx", 4))
    model.metadata_props.add(key="token_bounds", value="MARKMARK")
    raw = model.SerializeToString().replace(b"MARKMARK", b"\xaf\xfe\xaf\xfe\xaf\xfe\xaf\xfe")
    (tmp_path / "m.onnx").write_bytes(raw)
    judge(run_cli(["run", tmp_path / "m.onnx", "--input", "x=[1.0]", "-o", tmp_path / "y.npz"], capfd),
          "not UTF-8 text")


_TRAIN_THEN_RUN = """
import sys
import numpy as np
from pseudoformer.cli import main
from pseudoformer.model import load
from pseudoformer.passes.training_step import Optimizer
from pseudoformer.training.compile import compile_step
from pseudoformer.training.runtimes import OrtSplitStep, make_runtime

alg, small, bomb, out = sys.argv[1:5]
assert main(["run", small, "--input", "x=[1.0]", "-o", out]) == 0  # a run first: its limit is registered
model = load(alg, defines=["L=1", "H=2", "d_e=8", "d_mlp=16", "d_attn=4", "d_mid=4", "N_V=11", "ell_max=16",
                           "eps=1e-5"], seed=2)
step = compile_step(model.graph, model.weights, train=list(model.weights), optimizer=Optimizer("adamw"))
rt = make_runtime("onnxruntime", step.graph, step.frozen, step.state, split=step.split)
assert isinstance(rt, OrtSplitStep)
rt.step({"x": np.array([[1, 2, 3, 4]], np.int64)}, 0.01)
sys.exit(main(["run", bomb, "--input", "x=[1.0]", "-o", out]))
"""


def test_training_in_the_same_process_keeps_the_memory_limit(tmp_path: Path) -> None:
    """onnxruntime's process-wide CPU arena is whichever was registered last: a training runtime that
    registered its own after a `run` had set its limit left `run` believing the limit was in place, and the
    200-byte bomb then allocated 8 GiB."""
    small, bomb = _bomb(tmp_path / "small.onnx", 4), _bomb(tmp_path / "bomb.onnx", 2**31)
    alg = Path(__file__).parents[1] / "training" / "gpt2_loss.alg"
    r = subprocess.run([sys.executable, "-c", _TRAIN_THEN_RUN, str(alg), str(small), str(bomb),
                        str(tmp_path / "y.npz")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stderr
    assert "needs more memory than the" in r.stderr, r.stderr


def test_each_runner_keeps_the_memory_limit_it_asked_for(tmp_path: Path) -> None:
    """The limit of onnxruntime's environment arena was the first one registered in the process, so a
    later runner asking for more (or less) silently ran under the first runner's limit."""
    from pseudoformer.backends.onnx.runner import OnnxRunner

    model = str(_bomb(tmp_path / "fill.onnx", 50_000_000))  # 200 MB of floats
    x = {"x": np.ones(1, np.float32)}
    tight = OnnxRunner(model, memory_limit=100_000_000)
    roomy = OnnxRunner(model, memory_limit=1_000_000_000)
    tight_again = OnnxRunner(model, memory_limit=100_000_000)
    assert roomy.run(x)["y"].shape == (50_000_000,)
    for runner in (tight, tight_again):
        with pytest.raises(Exception, match="Fail|FAIL|fail"):
            runner.run(x)
