"""The arrays TVM's kernels take, derived from the compile's weights one tensor at a time.

The TVM backend re-lays weights out at compile time: 4-bit codes into Q4_0's nibble order (nbits.py),
into rows of 16 for the int8 kernel (nbits_int8.py), float matrices into column panels (packing.py).
Given arrays, each is computed at once, as before. Given LazyTensors (a checkpoint read tensor by tensor,
matrices quantized when first loaded: passes/quantized_params.py), each re-layout is a `Derived` tensor
that remembers what it is computed from, and `stream` computes a model's parameters one after another:
a source read by several of them (a tied embedding's codes, gathered in Q4_0 order and multiplied in
rows of 16) is loaded once and let go after its last reader, so the float32 model, its quantized
copies and the re-laid-out copies are never all held at once; what stays is what TVM runs with.

`to_device` hands an array to TVM without a copy where it can (DLPack, on the CPU, when the array is
64-byte aligned as TVM requires); `TVMModel` then keeps a view of TVM's memory as its numpy weights.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pseudoformer.ir.lazy_tensor import LazyTensor, materialize

ALIGNMENT = 64  # what tvm.runtime.from_dlpack requires of the data


@dataclass(frozen=True, eq=False)
class Derived(LazyTensor):
    """fn(*sources' values), computed when loaded; `stream` sees its sources."""

    sources: tuple[Any, ...] = field(default=(), repr=False)
    fn: Callable[..., np.ndarray] | None = field(default=None, repr=False)


def derive(fn: Callable[..., np.ndarray], shape: Sequence[int], dtype: Any, *sources: Any) -> Any:
    """fn(*sources): now when every source is an array (the result), else a Derived tensor of `shape`."""
    if not any(isinstance(s, LazyTensor) for s in sources):
        return fn(*(np.asarray(s) for s in sources))

    def compute() -> np.ndarray:
        return fn(*(materialize(s) for s in sources))

    return Derived(tuple(int(d) for d in shape), np.dtype(dtype), compute, sources, fn)


def _leaves(value: Any, out: list[LazyTensor]) -> list[LazyTensor]:
    if isinstance(value, Derived):
        for s in value.sources:
            _leaves(s, out)
    elif isinstance(value, LazyTensor):
        out.append(value)
    return out


def stream(values: Mapping[str, Any], names: Sequence[str]) -> Iterator[tuple[str, np.ndarray]]:
    """(name, C-contiguous array) for each of `names`, in order, computed as it is reached: each LazyTensor
    they are derived from is loaded once, kept while a later name still reads it, and dropped after."""
    reads = {n: _leaves(values[n], []) for n in names}
    left = Counter(id(leaf) for leaves in reads.values() for leaf in leaves)
    kept: dict[int, np.ndarray] = {}

    def load(v: Any) -> np.ndarray:
        if isinstance(v, Derived):
            assert v.fn is not None
            return v.fn(*(load(s) for s in v.sources))
        if not isinstance(v, LazyTensor):
            return np.asarray(v)
        if id(v) in kept:
            return kept[id(v)]
        a = v.load()
        if left[id(v)] > 1:  # another name reads it after this one
            kept[id(v)] = a
        return a

    for name in names:
        value = values[name]
        a = np.ascontiguousarray(load(value), dtype=value.dtype)
        for leaf in reads[name]:
            left[id(leaf)] -= 1
            if not left[id(leaf)]:
                kept.pop(id(leaf), None)
        yield name, a


def to_device(a: np.ndarray, dev: Any) -> Any:
    """A TVM tensor of `a` on `dev`: `a`'s own memory on the CPU when it is aligned (no copy), else a copy."""
    import tvm

    if dev.dlpack_device_type() == tvm.cpu().dlpack_device_type() and a.flags.c_contiguous \
            and a.flags.writeable and a.ctypes.data % ALIGNMENT == 0 and a.size:
        return tvm.runtime.from_dlpack(a)
    return tvm.runtime.tensor(a, dev)

