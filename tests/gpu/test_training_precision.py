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

FP16_TRACK = 3e-2  # fp16 on CUDA against fp32 on the CPU: each step's loss, relative

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")]


def test_bf16_on_cuda_tracks_fp32_on_the_cpu() -> None:
    full = train(LOSS, _data(), steps=20, **PLAN)
    half = train(LOSS, _data(), steps=20, precision="bf16", provider="cuda", **PLAN)
    got, want = np.array(half.losses), np.array(full.losses)
    np.testing.assert_allclose(got, want, rtol=BF16_TRACK)
    assert np.abs(got / want - 1).max() > 1e-5  # computed in bf16
    assert {str(v.dtype) for v in half.weights.values()} == {"float32"}


def test_fp16_on_cuda_scales_the_loss_and_tracks_fp32_on_the_cpu() -> None:
    full = train(LOSS, _data(), steps=20, **PLAN)
    half = train(LOSS, _data(), steps=20, precision="fp16", provider="cuda", **PLAN)
    # the first step's gradients overflow at 2¹⁶ on either device (they do on the CPU: test_precision.py); the
    # steps skipped then lag the run, which stays within FP16_TRACK (on the CPU: 1.5e-2 over 3 skipped steps)
    assert half.skipped and half.skipped[0] == 1
    np.testing.assert_allclose(half.losses, full.losses, rtol=FP16_TRACK)
    assert {str(v.dtype) for v in half.weights.values()} == {"float32"}

