"""The TVM backend's lowerings: one Relax expression per IR op (lower.py binds it and checks its shape).

A lowering may accept only some nodes of its op (`when(node)`); a node no lowering accepts is
decomposed into its formula before lowering (passes/decompose.py). Attention of the batched form without
a mask operand is one kernel of ours on a CPU (attention.py); other attention, and any on a GPU (build.prepare
refuses the ops of attention.CPU_ONLY there), is its decomposition (matmul, masks, softmax, matmul), which
the matmul and softmax schedules cover. The RMS norm over another axis than the last is its formula too
(TVM 0.27's legalization of rms_norm indexes γ wrongly there).

The family modules take TVM's names from here, after the guard that explains a missing TVM.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pseudoformer.backends.lowering_table import LoweringTable
from pseudoformer.backends.tvm.guard import require_tvm
from pseudoformer.ir.node import Node

if TYPE_CHECKING:
    from pseudoformer.backends.tvm.lower import RelaxLowering

tvm = require_tvm()
from tvm import relax, tirx  # noqa: E402  (after the guard, which explains a missing TVM)
from tvm.relax import op as R  # noqa: E402

LowerFn = Callable[["RelaxLowering", Node], Any]

LOWERINGS: LoweringTable[LowerFn] = LoweringTable("TVM")
lowers = LOWERINGS.lowers
accepts = LOWERINGS.accepts

__all__ = ["LOWERINGS", "LowerFn", "R", "accepts", "lowers", "relax", "tirx"]
