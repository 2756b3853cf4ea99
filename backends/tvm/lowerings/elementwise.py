"""Elementwise ops → Relax: unary functions, arithmetic, comparisons, logic, where, cast, GELU (and matmul,
which Relax spells like a binary op)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pseudoformer.backends.tvm.lowerings.registry import R, lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

if TYPE_CHECKING:
    from pseudoformer.backends.tvm.lower import RelaxLowering

_UNARY: dict[Op, Callable[[Any], Any]] = {
    Op.NEG: R.negative, Op.EXP: R.exp, Op.LOG: R.log, Op.SQRT: R.sqrt, Op.TANH: R.tanh, Op.ERF: R.erf,
    Op.SIN: R.sin, Op.COS: R.cos, Op.ABS: R.abs, Op.RELU: R.nn.relu, Op.NOT: R.logical_not,
    Op.FLOOR: R.floor, Op.CEIL: R.ceil,
}
_BINARY: dict[Op, Callable[[Any, Any], Any]] = {
    Op.ADD: R.add, Op.SUB: R.subtract, Op.MUL: R.multiply, Op.DIV: R.divide, Op.POW: R.power,
    Op.MOD: R.floor_mod,
    Op.MAX: R.maximum, Op.MIN: R.minimum, Op.LT: R.less, Op.LE: R.less_equal, Op.GT: R.greater,
    Op.GE: R.greater_equal, Op.EQ: R.equal, Op.NE: R.not_equal, Op.AND: R.logical_and,
    Op.OR: R.logical_or, Op.MATMUL: R.matmul,
}


@lowers(*_UNARY)
def _unary(lw: RelaxLowering, n: Node) -> Any:
    return _UNARY[n.op](lw.tensor(n.src[0]))


@lowers(*_BINARY)
def _binary(lw: RelaxLowering, n: Node) -> Any:
    shifted = _shifted_range(lw, n)
    if shifted is not None:
        return shifted
    return _BINARY[n.op](lw.tensor(n.src[0]), lw.tensor(n.src[1]))


def _shifted_range(lw: RelaxLowering, n: Node) -> Any:
    """arange(ℓ) + s, with s a size (the key/value cache's positions past + 0, 1, …), as the last ℓ of
    arange(s + ℓ). As an add of a size tensor, or as arange(s, s + ℓ), TVM 0.27's FuseTIR fuses it with
    its users into a PrimFunc that its RenewDefs pass rejects ("VarRemapGet(source) == nullptr");
    a strided slice (what the cache's slice of a position table already is) fuses fine."""
    if n.op is not Op.ADD:
        return None
    for i in (0, 1):
        r, s = n.src[i], n.src[1 - i]
        if r.op is Op.ARANGE and s.type.shape == () and id(s) in lw.sizes:
            start, length = lw.size(s), lw.size(r.src[0])
            last = lw.emit(R.strided_slice(lw.emit(R.arange(0, start + length, 1, "int64")), [0], [start],
                                           [start + length], assume_inbound=True))
            return R.reshape(last, [length])
    return None


@lowers(Op.GELU)
def _gelu(lw: RelaxLowering, n: Node) -> Any:
    x = lw.tensor(n.src[0])
    return R.nn.gelu(x) if n.attrs.get("approximate", "none") == "none" else R.nn.gelu_tanh(x)


@lowers(Op.CAST)
def _cast(lw: RelaxLowering, n: Node) -> Any:
    return R.astype(lw.tensor(n.src[0]), n.dtype.value)


@lowers(Op.WHERE)
def _where(lw: RelaxLowering, n: Node) -> Any:
    return R.where(*(lw.tensor(s) for s in n.src))
