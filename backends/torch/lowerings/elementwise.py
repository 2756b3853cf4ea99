"""Elementwise ops → torch: unary functions, arithmetic, comparisons, logic, where, cast, GELU, SiLU, SwiGLU.

Arithmetic on two sizes (int64 scalars: a DIM, a constant) stays arithmetic on sizes, in Python or on the
symbolic sizes of torch.fx and torch.export, so that a slice or a reshape takes the result as a size.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

from pseudoformer.backends.torch.dtypes import TORCH_DTYPE, torch
from pseudoformer.backends.torch.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

if TYPE_CHECKING:
    from pseudoformer.backends.torch.lower import TorchLowering

F = torch.nn.functional

_UNARY = {
    Op.NEG: torch.neg, Op.EXP: torch.exp, Op.LOG: torch.log, Op.SQRT: torch.sqrt, Op.TANH: torch.tanh,
    Op.ERF: torch.erf, Op.SIN: torch.sin, Op.COS: torch.cos, Op.ABS: torch.abs, Op.RELU: torch.relu,
    Op.NOT: torch.logical_not, Op.FLOOR: torch.floor, Op.CEIL: torch.ceil, Op.SILU: F.silu,
}
_BINARY = {
    Op.ADD: torch.add, Op.SUB: torch.sub, Op.MUL: torch.mul, Op.POW: torch.pow, Op.MAX: torch.maximum,
    Op.MIN: torch.minimum, Op.AND: torch.logical_and, Op.OR: torch.logical_or, Op.LT: torch.lt, Op.LE: torch.le,
    Op.GT: torch.gt, Op.GE: torch.ge, Op.EQ: torch.eq, Op.NE: torch.ne, Op.MOD: torch.remainder,
}


def _trunc_div(a: Any, b: Any) -> Any:
    """The IR's integer division, which truncates toward zero (C's, not Python's floor)."""
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)
        return -q if (a < 0) != (b < 0) else q
    return torch.sym_int(a / b)


_SIZE_ARITH = {Op.ADD: operator.add, Op.SUB: operator.sub, Op.MUL: operator.mul, Op.DIV: _trunc_div,
               Op.MOD: operator.mod, Op.MAX: max, Op.MIN: min}
_SYM = {Op.MAX: torch.sym_max, Op.MIN: torch.sym_min, Op.DIV: _trunc_div}


@lowers(*_UNARY)
def _unary(t: TorchLowering, n: Node) -> Any:
    return _UNARY[n.op](t.tensor(n.src[0]))


@lowers(*_BINARY, Op.DIV)
def _binary(t: TorchLowering, n: Node) -> Any:
    if t.is_scalar(n):  # arithmetic on sizes
        a, b = (t.value(s) for s in n.src)
        if isinstance(a, int) and isinstance(b, int):
            return _SIZE_ARITH[n.op](a, b)
        return t.call(_SYM[n.op], a, b) if n.op in _SYM else _SIZE_ARITH[n.op](a, b)
    a, b = (t.tensor(s) for s in n.src)
    if n.op is Op.DIV:
        return torch.div(a, b, rounding_mode=None if n.dtype.is_float else "trunc")
    return _BINARY[n.op](a, b)


@lowers(Op.MATMUL)
def _matmul(t: TorchLowering, n: Node) -> Any:
    return torch.matmul(t.tensor(n.src[0]), t.tensor(n.src[1]))


@lowers(Op.WHERE)
def _where(t: TorchLowering, n: Node) -> Any:
    return torch.where(*(t.tensor(s) for s in n.src))


@lowers(Op.CAST)
def _cast(t: TorchLowering, n: Node) -> Any:
    return t.tensor(n.src[0]).to(TORCH_DTYPE[n.dtype])


@lowers(Op.GELU)
def _gelu(t: TorchLowering, n: Node) -> Any:
    return F.gelu(t.tensor(n.src[0]), approximate=n.attrs.get("approximate", "none"))


@lowers(Op.SWIGLU)
def _swiglu(t: TorchLowering, n: Node) -> Any:
    gate, up = torch.chunk(t.tensor(n.src[0]), 2, dim=n.attrs["axis"] % n.type.rank)
    return F.silu(gate) * up
