"""Block-quantized weights: MATMUL_NBITS (x · Wᵀ) and GATHER_NBITS (rows of W), W stored in `bits` bits.

W ∈ ℝ^{N × K} (N outputs, K inputs) is cut along K into blocks of `block_size`; block j of row n is
stored as unsigned integers q with one scale s[n, j] and one zero point z[n, j]:

    W[n, k] = (q[n, k] − z[n, ⌊k / block_size⌋]) · s[n, ⌊k / block_size⌋]

The packing is onnxruntime's MatMulNBits layout, bit for bit, so the ONNX backend hands the arrays
over as they are (and GatherBlockQuantized reads the same bytes, which is how a tied embedding and
unembedding share one copy):

    packed       uint8 [N, k_blocks, block_size · bits / 8], k_blocks = ⌈K / block_size⌉; at 4 bits the
                 even k of a pair is the low nibble. The padding past K holds the zero point (W = 0).
    scales       float [N, k_blocks]
    zero points  uint8 [N, ⌈k_blocks · bits / 8⌉], packed as the weights; absent when symmetric:
                 then z = 2^(bits−1) (8 at 4 bits, 128 at 8 bits), as onnxruntime assumes.

The reference (`impl`) is dequantize, then the float op; `decompose` writes the same with integer
arithmetic of the IR (a backend without a kernel lowers that, and folds it where weights are
constant). The bits are packed by `pack` and read back by `dequantize`, here, once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import (
    REQUIRED,
    Attr,
    ExampleMaker,
    IRTypeError,
    NodeMaker,
    OpDef,
    integers,
    register,
    uniform,
)
from pseudoformer.ir.types import DType, TensorType

BITS = (4, 8)
BLOCK_SIZES = (16, 32, 64, 128, 256)
ACCURACY_LEVELS = (0, 1, 2, 3, 4)


def k_blocks(k: int, block_size: int) -> int:
    return -(-k // block_size)


def default_zero_point(bits: int) -> int:
    return 1 << (bits - 1)


class Operands(NamedTuple):
    """A matmul_nbits' or gather_nbits' operands by role (zero points are uint8, a bias is float)."""

    packed: Any
    scales: Any
    zero_points: Any | None
    bias: Any | None


def operands(n: Any, values: Sequence[Any] | None = None) -> Operands:
    """The weight operands of node n (or, given, the values in n's operand order) by role."""
    src = list(n.src if values is None else values)
    weights = src[1:] if n.op is Op.MATMUL_NBITS else [src[0], *src[2:]]
    packed, scales, *rest = weights
    # both ops put the optional operands at 3, 4 (matmul: x, packed, scales; gather: packed, ids, scales)
    zp = rest.pop(0) if rest and n.src[3].dtype is DType.uint8 else None
    return Operands(packed, scales, zp, rest[0] if rest else None)


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    """[..., 2m] values < 16 → [..., m] bytes, the even element in the low nibble."""
    if q.shape[-1] % 2:
        q = np.concatenate([q, np.zeros((*q.shape[:-1], 1), q.dtype)], axis=-1)
    return (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)


def _unpack_nibbles(b: np.ndarray) -> np.ndarray:
    out = np.empty((*b.shape[:-1], 2 * b.shape[-1]), np.uint8)
    out[..., 0::2] = b & 0x0F
    out[..., 1::2] = b >> 4
    return out


def pack(q: np.ndarray, zero_points: np.ndarray | None, k: int, bits: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Integer codes q [N, k_blocks, block_size] (the padding past `k` is overwritten) and zero
    points [N, k_blocks] (None: symmetric) → the packed weights and zero points described above."""
    n, kb, bs = q.shape
    z = np.full((n, kb), default_zero_point(bits), np.uint8) if zero_points is None else zero_points.astype(np.uint8)
    flat = q.astype(np.uint8).reshape(n, kb * bs)
    flat[:, k:] = np.repeat(z, bs, axis=1)[:, k:]  # the padding dequantizes to 0
    codes = flat.reshape(n, kb, bs)
    if bits == 4:
        return _pack_nibbles(codes), None if zero_points is None else _pack_nibbles(z)
    return np.ascontiguousarray(codes), None if zero_points is None else z


def dequantize(packed: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, *, k: int, bits: int,
               block_size: int) -> np.ndarray:
    """The weights W [N, k] the packed arrays stand for, in the scales' dtype."""
    n, kb = scales.shape
    codes = _unpack_nibbles(packed) if bits == 4 else packed
    if zero_points is None:
        z = np.full((n, kb), default_zero_point(bits), np.float32)
    else:
        z = (_unpack_nibbles(zero_points) if bits == 4 else zero_points)[:, :kb].astype(np.float32)
    w = (codes.reshape(n, kb, block_size).astype(np.float32) - z[..., None]) * scales[..., None].astype(np.float32)
    return w.reshape(n, kb * block_size)[:, :k].astype(scales.dtype)


# ---- typing


def _check_weights(src: Sequence[TensorType], attrs: Mapping[str, Any], op: Op) -> tuple[Any, TensorType | None]:
    """The operands after the activations: packed, scales[, zero points]; the bias, if any, is returned."""
    bits, bs, k = attrs["bits"], attrs["block_size"], attrs["K"]
    packed, scales, *rest = src
    n = packed.shape[0] if packed.rank == 3 else None
    kb = k_blocks(k, bs)
    if packed.dtype is not DType.uint8 or packed.shape != (n, kb, bs * bits // 8):
        raise IRTypeError(f"{op.value}: packed weights must be uint8[N, {kb}, {bs * bits // 8}] for K={k} in "
                          f"blocks of {bs} at {bits} bits, got {packed}")
    if not scales.dtype.is_float or scales.shape != (n, kb):
        raise IRTypeError(f"{op.value}: scales must be float[{n}, {kb}], got {scales}")
    bias = None
    if rest and rest[0].dtype is DType.uint8:
        zp = rest.pop(0)
        if zp.shape != (n, k_blocks(kb * bits, 8)):
            raise IRTypeError(f"{op.value}: zero points must be uint8[{n}, {k_blocks(kb * bits, 8)}], got {zp}")
    if rest:
        bias = rest.pop(0)
        if op is not Op.MATMUL_NBITS or bias.dtype != scales.dtype or bias.shape != (n,):
            raise IRTypeError(f"{op.value}: the bias must be {scales.dtype.value}[{n}], got {bias}")
    if rest:
        raise IRTypeError(f"{op.value}: too many operands")
    return n, bias


def _matmul_type(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x = src[0]
    n, _ = _check_weights(src[1:], attrs, Op.MATMUL_NBITS)
    if x.rank < 2 or x.shape[-1] != attrs["K"] or x.dtype != src[2].dtype:
        raise IRTypeError(f"matmul_nbits: the activations must be {src[2].dtype.value}[…, {attrs['K']}], got {x}")
    return TensorType(x.dtype, (*x.shape[:-1], n))


def _gather_type(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    packed, idx, *rest = src
    if idx.dtype is not DType.int64:
        raise IRTypeError(f"gather_nbits indices must be int64, got {idx}")
    _check_weights([packed, *rest], attrs, Op.GATHER_NBITS)
    return TensorType(rest[0].dtype, (*idx.shape, attrs["K"]))


# ---- reference semantics


def _weights_of(n: Any, o: Operands) -> np.ndarray:
    return dequantize(o.packed, o.scales, o.zero_points, k=n.attrs["K"], bits=n.attrs["bits"],
                      block_size=n.attrs["block_size"])


def _matmul_impl(n: Any, args: list[np.ndarray]) -> np.ndarray:
    o = operands(n, args)
    y = np.matmul(args[0], _weights_of(n, o).T)
    return (y if o.bias is None else y + o.bias).astype(args[0].dtype)


def _gather_impl(n: Any, args: list[np.ndarray]) -> np.ndarray:
    return np.take(_weights_of(n, operands(n, args)), args[1], axis=0)


# ---- the formula, for backends without a kernel


def dequantize_formula(n: Any, make: NodeMaker, packed: Any, scales: Any, zero_points: Any | None) -> Any:
    """W [N, K] in IR arithmetic: integer division and remainder unpack the nibbles."""
    bits, bs, k = n.attrs["bits"], n.attrs["block_size"], n.attrs["K"]
    rows, kb = scales.shape
    i64, fl = DType.int64, scales.dtype

    def nibbles(b: Any) -> Any:  # [..., m] bytes → [..., 2m] codes, low nibble first
        b = make(Op.CAST, b, dtype=i64)
        hi = make(Op.DIV, b, make.const(16, i64))
        lo = make(Op.SUB, b, make(Op.MUL, hi, make.const(16, i64)))
        r = b.type.rank
        pair = make(Op.CONCAT, make(Op.UNSQUEEZE, lo, axes=[r]), make(Op.UNSQUEEZE, hi, axes=[r]), axis=r)
        return make(Op.RESHAPE, pair, shape=[*b.shape[:-1], 2 * b.shape[-1]])

    codes = nibbles(packed) if bits == 4 else make(Op.CAST, packed, dtype=i64)
    if zero_points is None:
        z = make.const(default_zero_point(bits), i64)
    else:
        z = nibbles(zero_points) if bits == 4 else make(Op.CAST, zero_points, dtype=i64)
        if z.shape[-1] != kb:
            z = make(Op.SLICE, z, make.const(0, i64), make.const(kb, i64), axis=1, dim=kb)
        z = make(Op.UNSQUEEZE, z, axes=[2])
    w = make(Op.MUL, make(Op.CAST, make(Op.SUB, codes, z), dtype=fl), make(Op.UNSQUEEZE, scales, axes=[2]))
    w = make(Op.RESHAPE, w, shape=[rows, kb * bs])
    if kb * bs != k:
        w = make(Op.SLICE, w, make.const(0, i64), make.const(k, i64), axis=1, dim=k)
    return w


def _matmul_decompose(n: Any, make: NodeMaker) -> Any:
    o = operands(n)
    w = dequantize_formula(n, make, o.packed, o.scales, o.zero_points)
    y = make(Op.MATMUL, n.src[0], make(Op.TRANSPOSE, w, perm=[1, 0]))
    return y if o.bias is None else make(Op.ADD, y, o.bias)


def _gather_decompose(n: Any, make: NodeMaker) -> Any:
    o = operands(n)
    return make(Op.GATHER, dequantize_formula(n, make, o.packed, o.scales, o.zero_points), n.src[1], axis=0)


# ---- traits


def _matmul_positions(n: Any, dim: str) -> tuple[int, ...] | str:
    if n.src[0].shape[-1] == dim:
        return "a matrix product sums over positions"
    return (0,)


def _gather_positions(n: Any, dim: str) -> tuple[int, ...] | str:
    return (1,)


def _matmul_example(make: ExampleMaker) -> list[Any]:
    """4 bits with zero points and a bias, K = 6 padded to a block of 16; 8 bits, symmetric, K = 20 in two blocks."""
    x, x20 = make.input("x", DType.float32, "batch", "seq", 6), make.input("x20", DType.float32, "batch", "seq", 20)
    four = (make.param("w4", DType.uint8, 5, 1, 8), make.param("s4", DType.float32, 5, 1, values=uniform(0, 1)),
            make.param("z4", DType.uint8, 5, 1), make.param("bias", DType.float32, 5))
    eight = (make.param("w8", DType.uint8, 3, 2, 16), make.param("s8", DType.float32, 3, 2, values=uniform(0, 0.02)))
    return [make(Op.MATMUL_NBITS, x, *four, bits=4, block_size=16, K=6, accuracy_level=0),
            make(Op.MATMUL_NBITS, x20, *eight, bits=8, block_size=16, K=20)]


def _gather_example(make: ExampleMaker) -> list[Any]:
    """Rows of an 8-bit symmetric table, K = 20 in two blocks of 16, by token id; of a 4-bit one with zero points."""
    ids = make.input("ids", DType.int64, "batch", "seq", values=integers(0, 16))
    eight = (make.param("t8", DType.uint8, 16, 2, 16), ids, make.param("s8", DType.float32, 16, 2, values=uniform(0, 0.02)))
    four = (make.param("t4", DType.uint8, 16, 1, 8), ids, make.param("s4", DType.float32, 16, 1, values=uniform(0, 1)),
            make.param("z4", DType.uint8, 16, 1))
    return [make(Op.GATHER_NBITS, *eight, bits=8, block_size=16, K=20),
            make(Op.GATHER_NBITS, *four, bits=4, block_size=16, K=6)]


_FORMAT = (Attr("bits", "int", REQUIRED, BITS), Attr("block_size", "int", REQUIRED, BLOCK_SIZES), Attr("K", "int"))

register(
    OpDef(Op.MATMUL_NBITS, "x · Wᵀ (+ bias), W [N, K] block-quantized: operands x, packed, scales[, zero points]"
          "[, bias]", (3, 5), _matmul_type, _matmul_impl,
          attrs=(*_FORMAT, Attr("accuracy_level", "int", 0, ACCURACY_LEVELS)),
          positions=_matmul_positions, decompose=_matmul_decompose, example=_matmul_example),
    OpDef(Op.GATHER_NBITS, "rows of W [N, K], block-quantized: operands packed, indices, scales[, zero points]",
          (3, 4), _gather_type, _gather_impl, attrs=_FORMAT, positions=_gather_positions,
          decompose=_gather_decompose, example=_gather_example),
)
