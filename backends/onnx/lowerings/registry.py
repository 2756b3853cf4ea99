"""The ONNX backend's lowerings: one per IR op, registered by the module of its family.

A lowering emits the ONNX nodes of one IR node (through the Emitter) and returns its value's name,
or the names of its results for an op with several. It may accept only some nodes of its op (an
opset before the ONNX op existed, an axis the kernel does not take): `when(node, opset)`. A node no
lowering accepts is decomposed into its formula before lowering (passes/decompose.py), which is why
attention by parts, for one, is written nowhere in this backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pseudoformer.backends.lowering_table import LoweringTable
from pseudoformer.backends.onnx.emitter import Emitter
from pseudoformer.ir.node import Node

LowerFn = Callable[[Emitter, Node], Any]

LOWERINGS: LoweringTable[LowerFn] = LoweringTable("ONNX")
lowers = LOWERINGS.lowers


def accepts(n: Node, opset: int) -> bool:
    """Whether the ONNX backend lowers node n itself at this opset (else it lowers n's decomposition)."""
    return LOWERINGS.accepts(n, opset)
