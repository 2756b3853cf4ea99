"""An index computed from map variables into data that varies with one of them: `X[c, p(t) + i, q(t) + j]`, an
image's patches (ViT), where the data X is per example and, after its last axis is gathered by q(t) + j, varies
with t as the index p(t) + i does. A plain gather would index every t of the data with every t of the index, so
this is one GATHER_ELEMENTS (take_along_axis): the index laid out on the data's axes — the shared variables at
theirs, its own variable (i) on the indexed axis — reads one entry per output. (computed_index.pick, a one-hot
sum over the indexed axis, builds data × that axis: about 400 MB per image for ViT-B/16 at 224².)"""

from __future__ import annotations

from pseudoformer.frontend.frame import Frame
from pseudoformer.frontend.tensor_ops import labels, to_layout
from pseudoformer.frontend.values import Val
from pseudoformer.ir import Op


def gather_along(f: Frame, v: Val, i: int, idx: Val) -> Val | None:
    """v[idx] along dim i, for an idx of map variables (not per example) that shares some with v and has at
    most one of its own; None for any other (computed_index.pick then sums it one-hot)."""
    if idx.batched or idx.dims or idx.kind not in ("index", "token"):
        return None
    shared = [n for n in idx.free_vars if n in v.free_vars]
    own = [(n, s) for n, s in idx.free if n not in v.free_vars]
    if not shared or len(own) > 1:
        return None
    cur = labels(v)
    axis = cur.index(("d", i))
    slot = ("f", own[0][0]) if own else ("unit", None)  # what the indexed axis holds in the output
    target = [slot if lab == ("d", i) else lab for lab in cur]
    node = to_layout(f.b, idx, target)
    if node.type.rank < len(cur):  # the leading axes idx lacks (the batch axis): unit axes
        node = f.b.node(Op.UNSQUEEZE, node, axes=list(range(len(cur) - node.type.rank)))
    out = f.b.node(Op.GATHER_ELEMENTS, v.node, node, axis=axis)
    if not own:
        out = f.b.node(Op.SQUEEZE, out, axes=[axis])
    got = [lab for lab in target if lab != ("unit", None)]
    dims_left = [x for x in range(len(v.dims)) if x != i]
    canonical = [("b", None)] * v.batched + [("d", x) for x in dims_left] + [("f", n) for n, _ in v.free]
    canonical += [("f", n) for n, _ in own]
    tmp = Val(out, v.kind, v.dims, v.free + tuple(own), v.batched)
    node = to_layout(f.b, tmp, canonical, own=got)
    return Val(node, v.kind, tuple(v.dims[x] for x in dims_left), v.free + tuple(own), v.batched)
