"""MATMUL_NBITS and GATHER_NBITS → TVM: our own kernels (nbits.py), called with call_tir.

Float32 activations only (a float16 model's quantized ops take their formula, passes/decompose.py).
On a CPU the product's PrimFunc is marked opaque, and scheduled by its own rule (nbits_schedule.py), so that fusion
leaves it whole: its bias and its neighbours are separate kernels. For a GPU it is a dequantize stage
and a product, which dlight's GPU rules schedule together (nbits.matmul_dequantized).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pseudoformer.backends.tvm.fusion import OPAQUE  # fusion leaves our kernels whole
from pseudoformer.backends.tvm.lowerings.registry import R, lowers, tirx
from pseudoformer.backends.tvm.nbits import gather_nbits, matmul_dequantized, matmul_nbits, split_params
from pseudoformer.backends.tvm.nbits_int8 import ROWS, isa, matmul_int8_func, names
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op
from pseudoformer.ir.ops.quantized import operands
from pseudoformer.ir.types import DType

if TYPE_CHECKING:
    from pseudoformer.backends.tvm.lower import RelaxLowering



def _float32(n: Node) -> bool:
    return operands(n).scales.dtype is DType.float32


def _split(lw: RelaxLowering, packed: Node) -> bool:
    """Whether the packed weights are in Q4_0's nibble order (build.py re-packs these, nbits.split_params)."""
    if "split_params" not in lw.notes:
        lw.notes["split_params"] = split_params(lw.graph)
    return packed.op is Op.PARAM and packed.attrs["name"] in lw.notes["split_params"]


def _int(v: int) -> Any:
    return tirx.IntImm("int64", v)


@lowers(Op.MATMUL_NBITS, when=_float32)
def _matmul_nbits(lw: RelaxLowering, n: Node) -> Any:
    o = operands(n)
    bits, bs, k = n.attrs["bits"], n.attrs["block_size"], n.attrs["K"]
    x = lw.tensor(n.src[0])
    lead = lw.shape(x)[:-1]
    rows = lead[0]
    for d in lead[1:]:
        rows = rows * d
    x = lw.emit(R.reshape(x, [rows, _int(k)]))
    kb = int(n.src[2].shape[1])
    if kb * bs != k:  # the padding's weights are 0; the activations there must be finite: zeros
        x = lw.emit(R.nn.pad(x, [0, 0, 0, kb * bs - k]))
    n_out = int(n.src[1].shape[0])
    if lw.int8 and names(n)[0] in lw.param_vars:
        y = _int8_product(lw, x, n, kb, bs, n_out)
    else:
        y = _float_product(lw, x, n, o, bits, bs)
    if o.bias is not None:
        y = lw.emit(R.add(y, lw.tensor(o.bias)))
    return R.reshape(y, [*lead, _int(n_out)])


def _int8_product(lw: RelaxLowering, x: Any, n: Node, kb: int, bs: int, n_out: int) -> Any:
    """x [rows, kb·bs] times the rows-of-16 weights by nbits_int8's kernel, which quantizes x to int8 per block
    itself: one call a product (a separate quantize_x kernel was a second call and three more tensors)."""
    import tvm

    from pseudoformer.backends.tvm.build import make_target

    n16 = -(-n_out // ROWS)
    key = ("int8_kernel", n16, kb, bs)
    if key not in lw.notes:
        func = matmul_int8_func(n16, kb, bs, isa(make_target("llvm")), quantizes=True).with_attr(
            "op_pattern", OPAQUE)
        lw.notes[key] = lw.bb.add_func(func, f"matmul_int8_{n16 * ROWS}x{kb * bs}")
    rows = lw.shape(x)[0]
    w, s, z = (lw.param_vars[name] for name in names(n))
    y = lw.emit(R.call_tir(lw.notes[key], [x, w, s, z], tvm.relax.TensorType([rows, _int(n16 * ROWS)], "float32")))
    if n16 * ROWS != n_out:
        y = lw.emit(R.strided_slice(y, [1], [0], [n_out], assume_inbound=True))
    return y


def _float_product(lw: RelaxLowering, x: Any, n: Node, o: Any, bits: int, bs: int) -> Any:
    """The float32 product: nbits.matmul_nbits on a CPU, the dequantize-and-product pair on a GPU."""
    weights = [lw.tensor(t) for t in (o.packed, o.scales, o.zero_points) if t is not None]
    has_zp = o.zero_points is not None
    cpu = lw.target_kind == "llvm"
    kernel = matmul_nbits if cpu else matmul_dequantized
    call = lw.bb.call_te(lambda a, p, s, *z: kernel(a, p, s, z[0] if has_zp else None, bits=bits, block_size=bs,
                                                    split=_split(lw, o.packed)),
                         x, *weights, primfunc_name_hint=f"matmul_nbits{bits}")
    if cpu:
        gv = call.args[0]
        lw.bb.update_func(gv, lw.bb.get()[gv].with_attr("op_pattern", OPAQUE))
    return lw.emit(call)


@lowers(Op.GATHER_NBITS, when=_float32)
def _gather_nbits(lw: RelaxLowering, n: Node) -> Any:
    o = operands(n)
    ids = lw.tensor(n.src[1])
    shape = lw.shape(ids)
    count = _int(1)
    for d in shape:
        count = count * d
    flat = lw.emit(R.reshape(ids, [count]))
    weights = [lw.tensor(t) for t in (o.scales, o.zero_points) if t is not None]
    has_zp = o.zero_points is not None
    attrs = {"bits": n.attrs["bits"], "block_size": n.attrs["block_size"], "k": n.attrs["K"],
             "split": _split(lw, o.packed)}
    rows = lw.emit(lw.bb.call_te(lambda p, i, s, *z: gather_nbits(p, i, s, z[0] if has_zp else None, **attrs),
                                 lw.tensor(o.packed), flat, *weights, primfunc_name_hint="gather_nbits"))
    return R.reshape(rows, [*shape, _int(n.attrs["K"])])

