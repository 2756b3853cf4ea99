"""TOPK → ONNX TopK (largest, sorted: ties to the lower index, as the IR's numpy reference orders them)."""

from __future__ import annotations

from pseudoformer.backends.onnx.emitter import Emitter
from pseudoformer.backends.onnx.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op


@lowers(Op.TOPK)
def _topk(e: Emitter, n: Node) -> str:
    indices = n.attrs["result"] == "indices"
    other = f"{e.out}.unused"  # TopK always makes both; the one not asked for is left unread
    outputs = [other, e.out] if indices else [e.out, other]
    e.emit_multi("TopK", [e.value(n.src[0]), e.ints([n.attrs["k"]])], outputs,
                 axis=n.attrs["axis"] % n.src[0].type.rank, largest=1, sorted=1)
    return e.out
