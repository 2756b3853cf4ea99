"""The ONNX backend's lowerings: one per IR op, registered by the module of its family.

A lowering emits the ONNX nodes of one IR node (through the Emitter) and returns its value's name,
or the names of its results for an op with several. It may accept only some nodes of its op (an
opset before the ONNX op existed, an axis the kernel does not take); a node no lowering accepts is
decomposed into its formula before lowering (passes/decompose.py), which is why attention by parts,
for one, is written nowhere in this backend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pseudoformer.backends.onnx.emitter import Emitter
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

LowerFn = Callable[[Emitter, Node], Any]


@dataclass(frozen=True)
class Lowering:
    fn: LowerFn
    when: Callable[[Node, int], bool] | None = None  # (node, opset) → whether this lowering takes it

    def accepts(self, n: Node, opset: int) -> bool:
        return self.when is None or self.when(n, opset)


LOWERINGS: dict[Op, Lowering] = {}


def lowers(*ops: Op, when: Callable[[Node, int], bool] | None = None) -> Callable[[LowerFn], LowerFn]:
    def register(fn: LowerFn) -> LowerFn:
        for op in ops:
            if op in LOWERINGS:
                raise ValueError(f"two ONNX lowerings of {op.value}")
            LOWERINGS[op] = Lowering(fn, when)
        return fn
    return register


def accepts(n: Node, opset: int) -> bool:
    """Whether the ONNX backend lowers node n itself at this opset (else it lowers n's decomposition)."""
    lowering = LOWERINGS.get(n.op)
    return lowering is not None and lowering.accepts(n, opset)
