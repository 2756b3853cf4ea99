"""SiLU and SwiGLU → Relax."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pseudoformer.backends.tvm.lowerings.registry import R, lowers, relax
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

if TYPE_CHECKING:
    from pseudoformer.backends.tvm.lower import RelaxLowering

@lowers(Op.SILU)
def _silu(lw: RelaxLowering, n: Node) -> Any:
    return R.nn.silu(lw.tensor(n.src[0]))


@lowers(Op.SWIGLU)
def _swiglu(lw: RelaxLowering, n: Node) -> Any:
    halves = lw.emit(R.split(lw.tensor(n.src[0]), 2, axis=n.attrs["axis"] % n.src[0].type.rank))
    return R.multiply(R.nn.silu(relax.TupleGetItem(halves, 0)), relax.TupleGetItem(halves, 1))
