"""A second VM function for the common case: main with some run-time dims fixed, a decode step's batch and new
positions at 1.

main's sizes are symbolic, so the Relax VM builds a shape at run time for every tensor it allocates
(vm.builtin.make_shape from a heap of the sizes), plans storage per call, and turns the sizes into values for
kernels that take them: one SmolLM2-135M decode step made 5,909 VM builtin calls beside 1,335 kernel calls.
With the batch and the new positions at 1 only the cache's length stays symbolic (benchmarks/TVM.md).

The copy keeps main's graph up to fusion and calls the very kernels main calls: the sizes are bound after
FuseOps/FuseTIR (bind_specialised). Bound before, the specialised function's kernels would be compiled a second
time, and FuseTIR refuses to fuse a kernel lowered with symbolic shapes (ours, packing.py and nbits.py) into one
of fixed shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pseudoformer.backends.tvm.guard import require_tvm
from pseudoformer.backends.tvm.lower import _var_name
from pseudoformer.base.errors import BackendError

tvm = require_tvm()
from tvm import relax  # noqa: E402
from tvm.relax.utils import copy_with_new_vars  # noqa: E402

SPECIALISED = "specialised"  # the VM function: main with some dims fixed
_SIZES = "pseudoformer.sizes"  # its attribute until bind_specialised: Relax var name -> size


def with_specialised(mod: Any, sizes: Mapping[str, int]) -> Any:
    """`mod` plus SPECIALISED: a copy of main that the pipeline fixes to `sizes` (IR dim name -> size)."""
    names = {str(v.name) for v in relax.analysis.defined_symbolic_vars(mod["main"])}
    unknown = [d for d in sizes if _var_name(d) not in names]
    if unknown:
        raise BackendError(f"cannot specialise {', '.join(unknown)}: not a run-time dim of the model's inputs")
    functions = dict(mod.functions_items())
    # fresh variables: FuseOps refuses a parameter that two functions define
    copy = copy_with_new_vars(mod["main"]).with_attrs({"global_symbol": SPECIALISED,
                                                       _SIZES: {_var_name(d): int(n) for d, n in sizes.items()}})
    functions[tvm.ir.GlobalVar(SPECIALISED)] = copy
    return tvm.IRModule(functions, attrs=mod.attrs)


@tvm.transform.module_pass(opt_level=0, name="BindSpecialised")
def bind_specialised(mod: Any, _ctx: Any) -> Any:
    """Fix the sizes with_specialised recorded on SPECIALISED: its shapes become constants, its memory is
    planned once, while it calls the kernels main calls. A pass of the pipeline, after fusion."""
    if SPECIALISED not in {gv.name_hint for gv in mod.get_global_vars()}:
        return mod
    func = mod[SPECIALISED]
    sizes = {str(k): int(v) for k, v in func.attrs[_SIZES].items()}
    found = {str(v.name): v for v in relax.analysis.defined_symbolic_vars(func)}
    mod = relax.transform.BindSymbolicVars({found[k]: n for k, n in sizes.items()}, SPECIALISED)(mod)
    mod[SPECIALISED] = mod[SPECIALISED].without_attr(_SIZES)
    return mod


def function_for(meta: Mapping[str, Any], shapes: Sequence[Sequence[int]]) -> str:
    """SPECIALISED where the inputs, of these shapes, have the sizes it was compiled for; else main."""
    return choose(probes(meta), lambda i: shapes[i])


def choose(found: Sequence[tuple[int, int, int]], shape_of: Callable[[int], Sequence[int]]) -> str:
    """The function for inputs whose shapes `shape_of(input)` gives, read only at `found` (probes)."""
    fits = bool(found) and all(int(shape_of(i)[axis]) == size for i, axis, size in found)
    return SPECIALISED if fits else "main"


def probes(meta: Mapping[str, Any]) -> list[tuple[int, int, int]]:
    """(input, axis, size) for the first input axis of each specialised dim: enough to choose the function,
    since a dim is one size across all the inputs (the VM rejects inputs that disagree, in either function).
    A decode step reads two sizes a token, not the ~250 of its ~60 inputs' shapes."""
    sizes = meta.get("specialised")
    if not sizes or "input_dims" not in meta:
        return []
    found: dict[str, tuple[int, int, int]] = {}
    for i, dims in enumerate(meta["input_dims"]):
        for axis, d in enumerate(dims):
            if isinstance(d, str) and d in sizes and d not in found:
                found[d] = (i, axis, int(sizes[d]))
    return list(found.values())
