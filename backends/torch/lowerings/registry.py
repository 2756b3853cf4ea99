"""The torch backend's lowerings: the torch ops of one IR node, written once against `TorchLowering` (lower.py).

A lowering reads its node's attributes and its operands' IR types, and calls torch functions on the operands'
values. The graph is traced once, when it is compiled: the values are torch.fx Proxies, so each torch call
becomes a node of the fx graph and whatever depends on the node alone (a static size, a permutation) is
computed then, in Python. A lowering may accept only some nodes of its op (`when(node)`); a node no lowering
accepts is decomposed into its formula first (passes/decompose.py), as for the other backends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pseudoformer.backends.lowering_table import LoweringTable
from pseudoformer.ir.node import Node

if TYPE_CHECKING:
    from pseudoformer.backends.torch.lower import TorchLowering

LowerFn = Callable[["TorchLowering", Node], Any]

LOWERINGS: LoweringTable[LowerFn] = LoweringTable("torch")
lowers = LOWERINGS.lowers
accepts = LOWERINGS.accepts
