"""The training step's values on a provider's device (training/runtimes.py, DeviceValues): θ, the gradients
and AdamW's state are OrtValues the device allocates, bound once, and the update runs where they are.

On the CPU the device's path (no numpy views, no pieces, η written with update_inplace) is run by turning
off `host_arrays`, and must equal the host path bit for bit; on CUDA (`pytest -m cuda`) the same steps
run on the GPU and agree with the CPU's to the tolerance of two kernel libraries."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.base.errors import UsageError
from pseudoformer.training import runtimes
from pseudoformer.training.runtimes import OrtSplitStep, OrtStep, make_runtime
from tests.gpu.cuda import HAS_CUDA, cuda
from tests.training.test_step_backends import OPTIMIZERS, X, _reference, _step


class _DeviceOnCpu(runtimes.DeviceValues):
    def __init__(self, ort, provider: str) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ort, provider)
        self.host_arrays = False


def _batches(n: int) -> list[dict[str, np.ndarray]]:
    return [{"x": np.roll(X, i, axis=1)} for i in range(n)]


@pytest.mark.parametrize("opt", OPTIMIZERS)
def test_the_device_path_on_the_cpu_equals_the_host_path(opt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    step = _step(opt)
    host = make_runtime("onnxruntime", step.graph, step.frozen, step.state, split=step.split, update_chunk=5)
    monkeypatch.setattr(runtimes, "DeviceValues", _DeviceOnCpu)
    device = make_runtime("onnxruntime", step.graph, step.frozen, step.state, split=step.split, update_chunk=5)
    assert isinstance(device, OrtSplitStep) and not device.memory.host_arrays
    assert device.pieces == [] and device.arrays == {}  # whole tensors, no host views
    assert host.pieces != []
    where = {k: v.data_ptr() for k, v in device.buffers[0].items()}
    for i, batch in enumerate(_batches(5)):
        assert device.step(batch, 0.05 * (i + 1)) == host.step(batch, 0.05 * (i + 1)), i
    got, want = device.values(), host.values()
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    # updated in place: the same buffers after five steps
    assert {k: v.data_ptr() for k, v in device.buffers[0].items()} == where


def test_the_one_graph_step_allocates_its_second_set_on_the_device() -> None:
    step = _step("adamw")
    losses, want = _reference(step)
    rt = make_runtime("onnxruntime", step.graph, step.frozen, step.state, provider="cpu")
    assert isinstance(rt, OrtStep)
    got = [rt.step({"x": X}, 0.05) for _ in range(3)]
    np.testing.assert_allclose(got, losses, rtol=1e-5)
    assert all(v.device_name() == "cpu" for s in rt.buffers for v in s.values())


@pytest.mark.skipif(HAS_CUDA, reason="this onnxruntime has CUDA: the refusal is for one without it")
@pytest.mark.parametrize("split", [True, False], ids=["split", "one-graph"])
def test_cuda_without_onnxruntime_gpu_is_one_line_naming_the_extra(split: bool) -> None:
    step = _step("sgd")
    with pytest.raises(UsageError, match=r"pseudoformer\[gpu\]") as e:
        make_runtime("onnxruntime", step.graph, step.frozen, step.state, split=step.split if split else None,
                     provider="cuda")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("backend", ["interpreter", "tvm"])
def test_another_backend_refuses_a_gpu_provider(backend: str) -> None:
    step = _step("sgd")
    with pytest.raises(UsageError, match="for the onnxruntime backend"):
        make_runtime(backend, step.graph, step.frozen, step.state, provider="cuda")


@pytest.mark.parametrize("split", [True, False], ids=["split", "one-graph"])
@pytest.mark.parametrize("opt", OPTIMIZERS)
@cuda
def test_on_cuda_the_values_stay_on_the_gpu_and_agree(opt: str, split: bool) -> None:
    step = _step(opt)
    losses, want = _reference(step, steps=5)
    rt = make_runtime("onnxruntime", step.graph, step.frozen, step.state, split=step.split if split else None,
                      provider="cuda")
    assert isinstance(rt, OrtSplitStep if split else OrtStep)
    assert rt.session.get_providers()[0] == "CUDAExecutionProvider"
    assert all(v.device_name() == "cuda" for s in rt.buffers for v in s.values())
    if split:
        assert all(v.device_name() == "cuda" for v in rt.grads.values()) and rt.lr.device_name() == "cuda"
    got = [rt.step({"x": X}, 0.05) for _ in range(5)]
    np.testing.assert_allclose(got, losses, rtol=1e-5)
    values = rt.values()
    for k in want:
        np.testing.assert_allclose(values[k], want[k], rtol=1e-4, atol=1e-6, err_msg=k)
