"""The onnxruntime runner: the provider asked for or a clear error, never a silent fallback."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx_cases import assert_matches, block, block_inputs, block_params, lower_checked

from pseudoformer.backends.onnx import BackendError, OnnxRunner
from pseudoformer.ir import interpreter

HAS_CUDA = "CUDAExecutionProvider" in ort.get_available_providers()


@pytest.fixture(scope="module")
def model():
    return lower_checked(block(), block_params())


def test_names_and_a_cpu_run(model):
    runner = OnnxRunner(model, threads=1)
    assert runner.input_names == ["x"]
    assert runner.output_names == ["P", "peak", "total", "attn"]
    assert runner.session.get_providers() == ["CPUExecutionProvider"]
    feed = block_inputs(2, 4)
    assert_matches(runner.run(feed), interpreter.run(block(), feed, block_params()))


@pytest.mark.skipif(HAS_CUDA, reason="this onnxruntime has CUDA")
def test_cuda_without_the_cuda_provider_is_an_error(model):
    with pytest.raises(BackendError) as err:
        OnnxRunner(model, provider="cuda")
    message = str(err.value)
    assert "CUDAExecutionProvider" in message and "CPUExecutionProvider" in message
    assert "pseudoformer[gpu]" in message


def test_unknown_provider_lists_the_valid_ones(model):
    with pytest.raises(BackendError, match="'tpu'.*cpu, cuda"):
        OnnxRunner(model, provider="tpu")


def test_bad_thread_count(model):
    with pytest.raises(BackendError, match="threads"):
        OnnxRunner(model, threads=0)


def test_inputs_must_match(model):
    runner = OnnxRunner(model)
    with pytest.raises(BackendError, match=r"missing \['x'\]"):
        runner.run({})
    with pytest.raises(BackendError, match=r"unexpected \['y'\]"):
        runner.run({**block_inputs(1, 2), "y": np.zeros(1)})
    with pytest.raises(BackendError, match="float64"):
        runner.run({"x": np.zeros((1, 2))})


def test_narrow_ints_are_widened(model):
    runner = OnnxRunner(model)
    feed = block_inputs(2, 3)
    assert_matches(runner.run({"x": feed["x"].astype(np.int32)}), runner.run(feed))


def test_a_missing_model_file_is_reported(tmp_path):
    with pytest.raises(BackendError, match="no model file"):
        OnnxRunner(tmp_path / "nope.onnx")


def test_without_onnxruntime_compiling_works_and_running_says_what_to_install():
    # A fresh interpreter, so that onnxruntime is not already imported.
    script = textwrap.dedent(f"""
        import sys
        sys.modules["onnxruntime"] = None  # makes `import onnxruntime` fail
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from onnx_cases import block, block_params
        from pseudoformer.backends.onnx import BackendError, OnnxRunner, to_onnx
        model = to_onnx(block(), block_params())
        try:
            OnnxRunner(model)
        except BackendError as e:
            print(e)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert "pseudoformer[cpu]" in done.stdout and "pseudoformer[gpu]" in done.stdout


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDAExecutionProvider in this onnxruntime")
def test_cuda_run_matches_the_interpreter(model):
    runner = OnnxRunner(model, provider="cuda")
    assert runner.session.get_providers()[0] == "CUDAExecutionProvider"
    for b, s in [(1, 1), (3, 8)]:
        feed = block_inputs(b, s)
        assert_matches(runner.run(feed), interpreter.run(block(), feed, block_params()), tol=1e-4)


def test_the_default_opset_runs_onnx_runtimes_attention_kernel(tmp_path: Path) -> None:
    """At an opset whose Attention onnxruntime has no kernel for, it inlines the op's ~30-node function body
    (opset 25 and 26 with onnxruntime 1.32): the optimised session must keep one Attention per layer."""
    import onnxruntime as ort

    from pseudoformer.deploy import compile

    model = compile("gpt2", config=os.devnull, defines=["L=2", "H=2", "d_e=8", "d_mlp=16", "d_attn=4", "d_mid=4",
                                                         "ell_max=8", "N_V=11", "eps=1e-5"])
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimised.onnx")
    options.log_severity_level = 3
    ort.InferenceSession(model.onnx.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ops = [n.op_type for n in onnx.load(str(tmp_path / "optimised.onnx")).graph.node]
    assert ops.count("Attention") == 2 and "Softmax" not in ops
