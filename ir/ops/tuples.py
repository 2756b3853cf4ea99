"""GET: one result of an op with several (a tuple), by index."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import Attr, IRTypeError, OpDef, register
from pseudoformer.ir.types import TensorType, TupleType


def _type(src: Sequence[Any], attrs: Mapping[str, Any]) -> TensorType:
    (t,) = src
    i = attrs["index"]
    if not isinstance(t, TupleType) or not 0 <= i < len(t.types):
        raise IRTypeError(f"get {i} of {t}: not an element of a tuple")
    return t.types[i]


register(OpDef(Op.GET, "element `index` of a tuple", 1, _type, lambda n, a: a[0][n.attrs["index"]],
               attrs=(Attr("index", "int"),)))
