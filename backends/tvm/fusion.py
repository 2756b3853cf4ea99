"""Reshapes fuse with their neighbours: one kernel for a layer's slice, reshape, transpose, rotation and cache
concatenation, where the Relax VM ran three.

LegalizeOps writes a reshape of symbolic shape (a decode step's [batch, seq, H·d] → [batch, seq, H, d]) with
index arithmetic that AnnotateTIROpPattern cannot classify, and calls it opaque (pattern 8): FuseOps then fuses
nothing across it, and the slices before it and the transposes after it each run as a kernel of their own.
A reshape is injective whatever its index arithmetic (each output element reads one input element), so
reshapes_injective says so (pattern 2, as TVM marks a reshape of fixed shape). Where a reshape still stands
alone after fusion, RewriteDataflowReshape makes it a view (build.pipeline).
"""

from __future__ import annotations

from typing import Any

from pseudoformer.backends.tvm.guard import require_tvm

tvm = require_tvm()
from tvm import relax, tirx  # noqa: E402

INJECTIVE = 2  # relay/relax OpPatternKind: kInjective
OPAQUE = 8  # kOpaque


@tvm.transform.module_pass(opt_level=0, name="ReshapesInjective")
def reshapes_injective(mod: Any, _ctx: Any) -> Any:
    """Mark the opaque PrimFuncs that only reshape (relax.analysis.has_reshape_pattern) as injective."""
    updates = {gv: func.with_attr("op_pattern", INJECTIVE) for gv, func in mod.functions_items()
               if isinstance(func, tirx.PrimFunc) and func.attrs is not None
               and int(func.attrs.get("op_pattern", -1)) == OPAQUE and _reshapes(func)}
    if not updates:
        return mod
    mod = mod.shallow_copy() if hasattr(mod, "shallow_copy") else tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
    for gv, func in updates.items():
        mod[gv] = func
    return mod


def _reshapes(func: Any) -> bool:
    try:
        return bool(relax.analysis.has_reshape_pattern(func))
    except tvm.error.InternalError:  # not one block (our own kernels): not a reshape
        return False
