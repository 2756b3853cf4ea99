"""Norms → Relax: layer norm, and the RMS norm over the last axis (over another, its formula)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pseudoformer.backends.tvm.lowerings.registry import R, lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

if TYPE_CHECKING:
    from pseudoformer.backends.tvm.lower import RelaxLowering

@lowers(Op.LAYER_NORM)
def _layer_norm(lw: RelaxLowering, n: Node) -> Any:
    x, g, b = (lw.tensor(s) for s in n.src)
    return R.nn.layer_norm(x, g, b, axes=[n.attrs["axis"] % n.src[0].type.rank], epsilon=float(n.attrs["eps"]))


@lowers(Op.RMS_NORM, when=lambda n: n.attrs["axis"] % n.type.rank == n.type.rank - 1)
def _rms_norm(lw: RelaxLowering, n: Node) -> Any:
    x, g = (lw.tensor(s) for s in n.src)
    return R.nn.rms_norm(x, g, axes=[n.type.rank - 1], epsilon=float(n.attrs["eps"]))
