"""Schedules for the PrimFuncs that legalization and fusion leave: dlight's rules on GPUs."""

from __future__ import annotations

from typing import Any


def schedule_passes(target: Any) -> list[Any]:
    """Passes that schedule every PrimFunc of a module for `target`; CPU kernels stay unscheduled for now."""
    if target.kind.name == "cuda":
        from tvm.s_tir import dlight as dl

        return [dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                        dl.gpu.GeneralReduction(), dl.gpu.Fallback())]
    return []
