"""A scatter-add of one entry per row into zeros → a select against the index, computed where it is read.

    scatter_add(zeros(s), d, w, v)   ⟶   where(iota(s[d]) == w, v, 0)      (iota laid along d; w, v broadcast on d)
    w, v: [s₀, …, 1, …] (unit on d, s elsewhere)

This is a gather's backward: the loss's pick of log P[x[t+1], t] (the lowering's take_along_dim over the
vocabulary) gets as cotangent a [B, ℓ, N_V] tensor of zeros with one entry per row added in. Inductor writes
the zeros (a vocabulary-sized buffer, 206 MB at GPT-2 small, batch 8) and scatters into them in a kernel of
its own, and the log-softmax's backward then reads them; as a select it is a pointwise expression that
inductor fuses into that backward, and nothing vocabulary-sized is written for it. (Inductor rewrites
`scatter(full, d, w, value)` so itself, scatter_upon_const_tensor; a scatter-*add* of a tensor it leaves.)

Exact: each entry is 0 + v, which is v (a -0.0 comes out -0.0 where the sum made it +0.0), or 0. An index out
of [0, s[d]) selects nothing here where the scatter would fail; the frontend has checked every index the loss
picks with (frontend/expressions/computed_index.py) before the graph runs.

Check (why it refuses): the index must have one entry along d and cover every other axis of the output, and
the values its shape.
"""

from __future__ import annotations

from typing import Any

import torch

from pseudoformer.backends.torch.inductor_rules.rule import FxRule, aten, emit, erase, shape, zeros_read_once


def match(n: torch.fx.Node) -> Any:
    base, dim, index, values = n.args
    if not zeros_read_once(base):
        return "not a scatter-add into zeros made for it"
    out, w, v = shape(n), shape(index), shape(values)
    d = dim % len(out)
    if w != v:
        return f"values {list(v)} are not the index's shape {list(w)}"
    if w[d] != 1 or any(w[k] != out[k] for k in range(len(out)) if k != d):
        return f"the index {list(w)} is not one entry per row of {list(out)} along axis {d}"
    return d


def rewrite(graph: torch.fx.Graph, n: torch.fx.Node, d: int) -> None:
    base, _, index, values = n.args
    out = shape(n)
    iota = emit(graph, n, torch.ops.prims.iota.default, out[d], start=0, step=1,
                dtype=index.meta["val"].dtype, device=index.meta["val"].device, requires_grad=False)
    along = emit(graph, n, aten.view.default, iota, [out[d] if k == d else 1 for k in range(len(out))])
    hit = emit(graph, n, aten.eq.Tensor, along, index)
    n.replace_all_uses_with(emit(graph, n, aten.where.ScalarOther, hit, values, 0.0))
    erase(graph, n, base)


RULE = FxRule("scatter_add_onto_zeros", (aten.scatter_add.default,), match, rewrite)
