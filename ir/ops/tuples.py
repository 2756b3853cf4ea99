"""GET: one result of an op with several (a tuple), by index."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import Attr, ExampleMaker, IRTypeError, OpDef, register
from pseudoformer.ir.types import DType, TensorType, TupleType


def _type(src: Sequence[Any], attrs: Mapping[str, Any]) -> TensorType:
    (t,) = src
    i = attrs["index"]
    if not isinstance(t, TupleType) or not 0 <= i < len(t.types):
        raise IRTypeError(f"get {i} of {t}: not an element of a tuple")
    return t.types[i]


def _example(make: ExampleMaker) -> list[Any]:
    """The results of cached attention (the one op with several), the last one first."""
    q, k = (make.input(n, DType.float32, "batch", 2, "seq", 4) for n in ("q", "k"))
    past = make.input("past", DType.float32, "batch", 2, "past", 4)
    both = make(Op.CACHED_ATTENTION, q, k, k, past, past, scale=0.5, causal=True)
    return [make(Op.GET, both, index=i) for i in (2, 0)]


register(OpDef(Op.GET, "element `index` of a tuple", 1, _type, lambda n, a: a[0][n.attrs["index"]],
               attrs=(Attr("index", "int"),), example=_example))
