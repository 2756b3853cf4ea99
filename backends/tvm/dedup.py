"""One PrimFunc per distinct kernel: FuseOps makes a copy of each fused kernel for every layer.

GPT-2 small's twelve layers give twelve identical copies of each of its kernels; scheduling and
LLVM then do the same work twelve times. Structurally equal PrimFuncs (names aside) are merged
before scheduling, which cuts GPT-2 small's compile time several-fold.
"""

from __future__ import annotations

from typing import Any

import tvm_ffi

from pseudoformer.backends.tvm.guard import require_tvm

tvm = require_tvm()
from tvm import relax, tirx  # noqa: E402


@relax.expr_functor.mutator
class _Remap(relax.PyExprMutator):
    def __init__(self, mod: Any, remap: dict[Any, Any]) -> None:
        super().__init__(mod)
        self.remap = remap

    def visit_global_var_(self, gv: Any) -> Any:  # noqa: N802 (TVM's visitor naming)
        return self.remap.get(gv, gv)


@tvm.transform.module_pass(opt_level=0, name="DedupPrimFuncs")
def dedup_prim_funcs(mod: Any, _ctx: Any) -> Any:
    seen: dict[int, list[tuple[Any, Any]]] = {}
    remap: dict[Any, Any] = {}
    for gv, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        body = func.without_attr("global_symbol") if "global_symbol" in func.attrs else func
        bucket = seen.setdefault(tvm_ffi.structural_hash(body), [])
        same = next((g for g, f in bucket if tvm_ffi.structural_equal(body, f)), None)
        if same is None:
            bucket.append((gv, body))
        else:
            remap[gv] = same
    if not remap:
        return mod
    mutator = _Remap(mod, remap)
    for gv, func in list(mod.functions_items()):
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return relax.transform.DeadCodeElimination()(mutator.builder_.get())
