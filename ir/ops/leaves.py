"""Leaves: a model input, a weight, a scalar constant."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import Attr, ExampleMaker, OpDef, register
from pseudoformer.ir.types import DType, TensorType


def _declared(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    return attrs["type"]


def _no_impl(n: Any, args: list[Any]) -> Any:
    # The interpreter binds inputs and params by name before it runs any node.
    raise NotImplementedError(f"{n.op.value} is bound by name, not computed")


def _param_check(n: Any) -> list[str]:
    if any(isinstance(d, str) for d in n.type.shape):
        return [f"param type {n.type} has symbolic dims; weights have fixed shapes"]
    return []


def _const(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    return TensorType(attrs["dtype"], ())


def _const_impl(n: Any, args: list[Any]) -> Any:
    return np.array(n.attrs["value"], dtype=np.dtype(n.attrs["dtype"].value))


def _leaves_example(make: ExampleMaker) -> list[Any]:
    """An input and a weight as outputs themselves, and a constant in a sum."""
    x = make.input("x", DType.float32, "batch", 3)
    return [x, make.param("w", DType.float32, 3, 2), make(Op.ADD, x, make.const(1.5, DType.float32))]


register(
    OpDef(Op.INPUT, "a model input, bound by name", 0, _declared, _no_impl,
          attrs=(Attr("name", "str"), Attr("type", "type")), inline="name", implied=("type",), example=_leaves_example),
    OpDef(Op.PARAM, "a weight, bound from a checkpoint or initialised", 0, _declared, _no_impl,
          attrs=(Attr("name", "str"), Attr("type", "type")), check=_param_check, inline="name", implied=("type",),
          example=_leaves_example),
    OpDef(Op.CONST, "a scalar constant", 0, _const, _const_impl,
          attrs=(Attr("value", "scalar"), Attr("dtype", "dtype")), inline="value", implied=("dtype",), example=_leaves_example),
)
