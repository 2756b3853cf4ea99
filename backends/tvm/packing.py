"""Pre-packed weights: `matmul(A, W)` with a weight W [K, N] becomes a matmul on W packed as [N/16, K, 16].

The CPU matmul kernel keeps a tile of C in registers and, for each k, reads 16 consecutive
columns of one row of W. Row-major W puts consecutive k a whole row apart (12 KiB for N = 3072),
so every read is a new page and a TLB miss; packed, one column panel is 64 contiguous bytes per k.

The packed copy is made in numpy at compile time (fold.pack) and replaces the weight among
main's parameters, whether they are then bound as constants or passed at run time. The packed product is
computed as Cp[..., i, n/16, 16] and written out as C[..., i, N] (sliced where N is not a multiple
of 16), so bias, GELU and residual epilogues still fuse with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pseudoformer.backends.tvm.guard import require_tvm
from pseudoformer.backends.tvm.weight_values import derive

tvm = require_tvm()
from tvm import relax, te  # noqa: E402
from tvm.relax import op as R  # noqa: E402

PANEL = 16  # columns per panel: two AVX2 vectors (one AVX-512 vector) of float32
_MATMUL = tvm.ir.Op.get("relax.matmul")


def pack(w: np.ndarray, panel: int) -> np.ndarray:
    """W [K, N] → Wp [⌈N/panel⌉, K, panel], zero-padded: one panel of columns contiguous per k."""
    k, n = w.shape
    panels = -(-n // panel)
    padded = np.zeros((k, panels * panel), np.float32)
    padded[:, :n] = w
    return np.ascontiguousarray(padded.reshape(k, panels, panel).transpose(1, 0, 2))


def packed_matmul(a: te.Tensor, wp: te.Tensor) -> te.Tensor:
    """C[..., i, j] for j < 16·panels, from Cp[..., i, n, c] = Σ_k A[..., i, k] · Wp[n, k, c].

    Cp is an einsum, which the schedule can pad and tile; C is the same numbers in C's layout,
    a second (injective) stage that the schedule folds into the write-back of each tile, so
    that epilogues after it (bias, GELU, residual) fuse as they would after a plain matmul.
    """
    *lead, _, k_extent = a.shape
    k = te.reduce_axis((0, k_extent), "k")
    shape = (*lead, a.shape[-2], wp.shape[0], wp.shape[2])
    cp = te.compute(shape, lambda *i: te.sum(a[(*i[:-2], k)] * wp[i[-2], k, i[-1]], axis=k), name="packed_matmul")
    panel = wp.shape[2]
    return te.compute((*lead, a.shape[-2], wp.shape[0] * panel),
                      lambda *i: cp[(*i[:-1], i[-1] // panel, i[-1] % panel)], name="unpack")


@relax.expr_functor.mutator
class _Pack(relax.PyExprMutator):
    def __init__(self, mod: Any, weights: dict[Any, str]) -> None:
        super().__init__(mod)
        self.weights = weights  # weight parameter var -> its name
        self.packed: dict[Any, Any] = {}  # weight var -> the var of its packed copy

    def visit_call_(self, call: Any) -> Any:  # noqa: N802 (TVM's visitor naming)
        call = super().visit_call_(call)
        if call.op != _MATMUL:
            return call
        a, w = call.args
        at, wt = a.ty, w.ty
        if w not in self.weights or wt.ndim != 2 or at.ndim < 2 or at.dtype != "float32" or wt.dtype != "float32":
            return call
        k, n = (int(d) for d in wt.shape.values)
        if n < PANEL:
            return call
        panels = -(-n // PANEL)
        if w not in self.packed:
            self.packed[w] = relax.Var(f"{w.name}_packed", relax.TensorType([panels, k, PANEL], "float32"))
        c = self.builder_.call_te(packed_matmul, a, self.packed[w], primfunc_name_hint="packed_matmul")
        # FuseOps fuses epilogues only into an "out-elementwise-fusable" producer; the analysis
        # would call a reduction followed by the unpack stage opaque.
        gv = c.args[0]
        self.builder_.update_func(gv, self.builder_.get()[gv].with_attr("op_pattern", 4))
        if panels * PANEL != n:
            c = R.strided_slice(self.builder_.emit(c), [at.ndim - 1], [0], [n], assume_inbound=True)
        return c


def pack_matmul_weights(mod: Any, param_names: list[str], weights: Mapping[str, np.ndarray],
                        ) -> tuple[Any, list[str], dict[str, np.ndarray]]:
    """Rewrite `main`'s float32 matmuls by a 2-D weight parameter to take its packed copy instead.

    `param_names` name main's parameters after its num_input inputs. Returns the module, the
    names of its weight parameters now (a weight only matmuls used is gone, its packed copy is
    new: "<name>#packed"), and the weights by those names.
    """
    main = mod["main"]
    n_in = int(main.attrs["num_input"])
    inputs, params = list(main.params[:n_in]), list(main.params[n_in:])
    names = dict(zip(params, param_names, strict=True))
    mutator = _Pack(mod, names)
    body = mutator.visit_expr(main.body)
    if not mutator.packed:
        return mod, list(param_names), dict(weights)
    used = set(relax.analysis.free_vars(body))
    kept = [p for p in params if p in used]
    new_names = [names[p] for p in kept] + [f"{names[w]}#packed" for w in mutator.packed]
    out = {names[p]: weights[names[p]] for p in kept}
    for w in mutator.packed:
        k, n = (int(d) for d in w.ty.shape.values)  # a lazy weight is packed when loaded (weight_values.derive)
        out[f"{names[w]}#packed"] = derive(lambda v: pack(np.asarray(v, np.float32), PANEL),
                                           (-(-n // PANEL), k, PANEL), np.float32, weights[names[w]])
    func = relax.Function(inputs + kept + list(mutator.packed.values()), body, main.ret_ty, main.is_pure,
                          main.attrs)
    mutator.builder_.update_func(mod.get_global_var("main"), func)
    return mutator.builder_.get(), new_names, out
