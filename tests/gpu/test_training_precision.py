"""`train --backend torch --provider cuda --precision bf16|fp16` (`pytest -m cuda`): torch.autocast on the GPU,
the float32 master weights and AdamW's state there, against the CPU's runs of the same plan. Skipped where torch
sees no CUDA device (the CPU tests of the same code are tests/training/test_precision.py)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pseudoformer.training.loop import train  # noqa: E402
from tests.training.test_precision import BF16_TRACK, LOSS, PLAN  # noqa: E402
from tests.training.test_torch_trainer import _data  # noqa: E402

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")]


def test_bf16_on_cuda_tracks_fp32_on_the_cpu() -> None:
    full = train(LOSS, _data(), steps=20, **PLAN)
    half = train(LOSS, _data(), steps=20, precision="bf16", provider="cuda", **PLAN)
    got, want = np.array(half.losses), np.array(full.losses)
    np.testing.assert_allclose(got, want, rtol=BF16_TRACK)
    assert np.abs(got / want - 1).max() > 1e-5  # computed in bf16
    assert {str(v.dtype) for v in half.weights.values()} == {"float32"}


def test_fp16_on_cuda_skips_as_the_cpu_does_and_tracks_it() -> None:
    # the same scale, the same overflowing steps (a gradient past 65504 at 2¹⁶ on either device), then the
    # same updates within two kernel libraries' fp16 roundings
    cpu = train(LOSS, _data(), steps=20, precision="fp16", **PLAN)
    gpu = train(LOSS, _data(), steps=20, precision="fp16", provider="cuda", **PLAN)
    assert gpu.skipped == cpu.skipped and gpu.skipped
    np.testing.assert_allclose(gpu.losses, cpu.losses, rtol=BF16_TRACK)
    assert {str(v.dtype) for v in gpu.weights.values()} == {"float32"}
