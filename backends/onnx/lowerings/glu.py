"""SiLU and SwiGLU → ONNX Sigmoid and Mul (onnxruntime 1.32 has no kernel for opset 24's Swish, and fuses
x·Sigmoid(x) itself); SwiGLU splits its operand into the gate and the up projection first."""

from __future__ import annotations

from pseudoformer.backends.onnx.emitter import Emitter
from pseudoformer.backends.onnx.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op


def _silu(e: Emitter, x: str, out: str | None = None) -> str:
    return e.emit("Mul", [x, e.emit("Sigmoid", [x])], out=out)


@lowers(Op.SILU)
def _silu_node(e: Emitter, n: Node) -> str:
    return _silu(e, e.value(n.src[0]), out=e.out)


@lowers(Op.SWIGLU)
def _swiglu(e: Emitter, n: Node) -> str:
    h = n.src[0]
    axis = n.attrs["axis"] % h.type.rank
    gate, up = f"{e.out}.gate", f"{e.out}.up"
    half = int(h.shape[axis]) // 2  # known and even (the typing rule); sizes, not num_outputs, which is opset 18's
    e.emit_multi("Split", [e.value(h), e.ints([half, half])], [gate, up], axis=axis)
    return e.emit("Mul", [_silu(e, gate), up], out=e.out)
