"""The concatenation of two tensors on a CPU as two row copies: a key/value cache grows by one position a step.

    out[r, 0 : w_a] = a[r, :],   out[r, w_a : w_a + w_b] = b[r, :]      (r < outer)

with each operand viewed, inside the kernel, as [outer, n_i · inner] (the axes before the concatenated one,
and it with those after): each copy is a contiguous run, which LLVM turns into memcpy. TVM's own
concatenation is one loop over the output with a select of the operand per element, which does not vectorise.
The views are the kernel's own (a buffer over the operand's data), not Relax reshapes: a reshape of a
function's argument of symbolic shape stayed a copying kernel (226 µs a call on a decode step's cache).
A call of fewer than parallel_gate.MIN_ELEMENTS elements stays on the calling thread; a larger one splits the
rows.
"""

from __future__ import annotations

from typing import Any

from pseudoformer.backends.tvm.guard import require_tvm
from pseudoformer.backends.tvm.parallel_gate import MIN_ELEMENTS, MIN_WORK_ATTR

tvm = require_tvm()
from tvm import tirx  # noqa: E402
from tvm.script import tirx as T  # noqa: E402


def _product(dims: list[Any]) -> Any:
    out: Any = tirx.IntImm("int64", 1)
    for d in dims:
        out = out * d
    return out


def concat2_func(dtype: str, rank: int, axis: int) -> Any:
    """The PrimFunc main(a, b, out) of rank `rank` joined on `axis`, every size symbolic."""
    dims = [tirx.Var(f"n{i}", "int64") for i in range(rank)]
    n_a, n_b = tirx.Var("n_a", "int64"), tirx.Var("n_b", "int64")
    shape_a, shape_b, shape_out = ([*dims[:axis], n, *dims[axis + 1:]] for n in (n_a, n_b, n_a + n_b))
    outer, inner = _product(dims[:axis]), _product(dims[axis + 1:])
    gate = {MIN_WORK_ATTR: 0}  # decided here, from the call's sizes

    @T.macro
    def rows(fa: Any, fb: Any, fo: Any, r: Any) -> None:
        for j in range(n_a * inner):
            fo[r, j] = fa[r, j]
        for j in range(n_b * inner):
            fo[r, n_a * inner + j] = fb[r, j]

    @T.prim_func(s_tir=True)
    def main(a: T.Buffer(shape_a, dtype), b: T.Buffer(shape_b, dtype), out: T.Buffer(shape_out, dtype)):
        T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True})
        fa = T.decl_buffer((outer, n_a * inner), dtype, data=a.data)
        fb = T.decl_buffer((outer, n_b * inner), dtype, data=b.data)
        fo = T.decl_buffer((outer, (n_a + n_b) * inner), dtype, data=out.data)
        if outer * (n_a + n_b) * inner < MIN_ELEMENTS:
            for r in range(outer):
                rows(fa, fb, fo, r)
        else:
            for r in T.parallel(outer, annotations=gate):
                rows(fa, fb, fo, r)

    return main
