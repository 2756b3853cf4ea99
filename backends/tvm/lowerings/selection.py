"""TOPK → topi.topk as a TE call (TVM 0.27 has relax.op.topk but no legalisation of it, as it has none of
cumsum). Ties go to the lower index, as the IR's numpy reference orders them; the test of every op's example
holds that."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pseudoformer.backends.tvm.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

if TYPE_CHECKING:
    from pseudoformer.backends.tvm.lower import RelaxLowering

from tvm import topi  # noqa: E402  (TVM is there: the registry's guard ran)


@lowers(Op.TOPK)
def _topk(lw: RelaxLowering, n: Node) -> Any:
    return lw.bb.call_te(topi.topk, lw.tensor(n.src[0]), n.attrs["k"], n.attrs["axis"] % n.src[0].type.rank,
                         n.attrs["result"], False, "int64")  # is_ascend=False
