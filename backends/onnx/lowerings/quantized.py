"""Block-quantized weights → onnxruntime's com.microsoft MatMulNBits and GatherBlockQuantized.

The IR keeps MatMulNBits' packing (ir/ops/quantized.py), so the packed weights, scales and zero
points are the ops' inputs as they are. GatherBlockQuantized wants the table as [N, K·bits/8]: a
Reshape of the same initializer, so a tied embedding and unembedding store their bytes once; where K
is not a whole number of blocks its rows come out padded, and a Slice cuts them back to K.
"""

from __future__ import annotations

from pseudoformer.backends.onnx.emitter import Emitter
from pseudoformer.backends.onnx.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op
from pseudoformer.ir.ops.quantized import operands

MS = "com.microsoft"


@lowers(Op.MATMUL_NBITS)
def _matmul_nbits(e: Emitter, n: Node) -> str:
    o = operands(n)
    inputs = [e.value(n.src[0]), e.value(o.packed), e.value(o.scales)]
    # MatMulNBits' optional inputs are positional: zero_points, g_idx, bias; "" skips one.
    if o.zero_points is not None or o.bias is not None:
        inputs.append(e.value(o.zero_points) if o.zero_points is not None else "")
    if o.bias is not None:
        inputs += ["", e.value(o.bias)]
    a = n.attrs
    out = e.emit("MatMulNBits", inputs, out=e.out, domain=MS, K=a["K"], N=n.shape[-1], bits=a["bits"],
                 block_size=a["block_size"], accuracy_level=a.get("accuracy_level", 0))
    e.annotate(out, n)
    return out


@lowers(Op.GATHER_NBITS)
def _gather_nbits(e: Emitter, n: Node) -> str:
    o, idx = operands(n), n.src[1]
    rows, kb, blob = o.packed.shape
    table = e.emit("Reshape", [e.value(o.packed), e.ints([rows, kb * blob])])
    a = n.attrs
    padded = kb * a["block_size"] != a["K"]
    inputs = [table, e.value(idx), e.value(o.scales)]
    if o.zero_points is not None:
        inputs.append(e.value(o.zero_points))
    out = e.emit("GatherBlockQuantized", inputs, out=None if padded else e.out, domain=MS, bits=a["bits"],
                 block_size=a["block_size"], gather_axis=0, quantize_axis=1)
    if padded:
        axis = idx.type.rank
        out = e.emit("Slice", [out, e.ints([0]), e.ints([a["K"]]), e.ints([axis])], out=e.out)
    e.annotate(out, n)
    return out
