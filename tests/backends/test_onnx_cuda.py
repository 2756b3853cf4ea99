"""Small GPT-2 on ONNX Runtime's CUDA provider against the CPU provider, from one compiled model.

Skipped, with the fix in its reason, wherever onnxruntime has no CUDAExecutionProvider: the CPU
package never has one, and onnxruntime-gpu has one only with an NVIDIA driver present.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from pseudoformer.backends.onnx import OnnxRunner
from pseudoformer.deploy import compile

NO_CUDA = "no CUDAExecutionProvider in this onnxruntime (install pseudoformer[gpu] on a machine with an NVIDIA GPU)"
HAS_CUDA = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
TOL = 1e-4  # cuBLAS and the CPU's kernels sum in different orders; fp32 on both sides
GPT2 = Path(__file__).resolve().parents[2] / "models" / "gpt2.alg"
# Random weights rather than an HF checkpoint: this compares two providers, not two implementations,
# and leaving torch unimported keeps the skip instant on machines without CUDA.
SMALL = dict(L=2, H=4, d_e=32, d_mlp=64, d_attn=8, d_mid=8, ell_max=64, N_V=101, eps=1e-5)


def _tokens(batch: int, seq: int) -> np.ndarray:
    return np.random.default_rng(batch * 1000 + seq).integers(0, SMALL["N_V"], (batch, seq), dtype=np.int64)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
def test_small_gpt2_on_cuda_matches_cpu() -> None:
    compiled = compile(GPT2, config=os.devnull, defines=[f"{k}={v}" for k, v in SMALL.items()], seed=1)
    gpu = OnnxRunner(compiled.onnx, provider="cuda")
    # Only CUDA is asked for, so it comes first; onnxruntime (1.31 on) lists the CPU after it as the fallback it
    # keeps for the shape arithmetic the CUDA provider places on the host by design.
    assert gpu.session.get_providers()[0] == "CUDAExecutionProvider"
    assert set(gpu.session.get_providers()) <= {"CUDAExecutionProvider", "CPUExecutionProvider"}
    assert gpu.session.get_provider_options()["CUDAExecutionProvider"]["use_tf32"] == "0"
    cpu = OnnxRunner(compiled.onnx, provider="cpu")
    for shape in [(2, 16), (1, 7), (3, 33), (8, 64)]:
        feed = {"x": _tokens(*shape)}
        want, got = cpu.run(feed)["Y"], gpu.run(feed)["Y"]
        assert got.shape == want.shape and got.dtype == want.dtype == np.float32
        assert np.abs(got - want).max() <= TOL, shape
    # The API's own path (CompiledModel.run) reaches the same provider.
    feed = {"x": _tokens(2, 16)}
    assert np.abs(compiled.run(feed, provider="cuda")["Y"] - cpu.run(feed)["Y"]).max() <= TOL
