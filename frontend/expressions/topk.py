"""top-k_{j ∈ [E]} v and argtop-k_{j ∈ [E]} v: the k largest values of v over j, largest first, and their
positions (from 1, as the paper counts). The reduced index j is replaced by a new leading index of size k, so
`for t ∈ [ℓ] : R[:, t] ← argtop-k_{j ∈ [E]} G[j, t]` fills the columns of R ∈ [E]^{k × ℓ}. One TOPK node; ties go
to the lower position, so argtop-1 is argmax."""

from __future__ import annotations

from pseudoformer.frontend.ast import Expr
from pseudoformer.frontend.errors import ShapeError, UnknownNameError
from pseudoformer.frontend.expressions.aggregates import over_index
from pseudoformer.frontend.expressions.core import handles
from pseudoformer.frontend.frame import Frame
from pseudoformer.frontend.sizes import Size
from pseudoformer.frontend.tensor_ops import free_to_dim
from pseudoformer.frontend.values import Val
from pseudoformer.ir import Op


def _k(f: Frame, spelled: str, e: Expr) -> Size:
    """k of top-k: a number, or a size known before the model runs (a hyperparameter)."""
    if spelled.isdigit():
        return Size.of(int(spelled))
    size = f.size_of_name(spelled, e.pos, create=False)
    if size is None:
        raise f.error(UnknownNameError, f"unknown size {spelled} in {e.text}: declare it (Hyperparameters: "
                      f"{spelled} ∈ ℕ) or write a number, as top-2_{{j ∈ [E]}}", e.pos)
    return f.b.resolve(size)


@handles("topk")
def _topk(f: Frame, e: Expr) -> Val:
    var, bound, body, spelled = e.args
    k = _k(f, spelled, e)
    v, internal = over_index(f, e, var, bound, body, f"picks entries over {var}")
    over = v.free_size(internal)
    assert over is not None
    over = f.b.resolve(over)
    if k.is_int and (k.value < 1 or (over.is_int and k.value > over.value)):
        raise f.error(ShapeError, f"{e.text} picks {k.value} of {over} entries: k must be between 1 and the "
                      f"number of entries", e.pos)
    axis = (1 if v.batched else 0) + len(v.dims) + v.free_vars.index(internal)
    positions = e.text.startswith("arg")
    node = f.b.node(Op.TOPK, v.node, k=k.dim(), axis=axis, result="indices" if positions else "values")
    free = tuple((name, k if name == internal else s) for name, s in v.free)
    return free_to_dim(f.b, Val(node, "index" if positions else "real", v.dims, free, v.batched), internal)
