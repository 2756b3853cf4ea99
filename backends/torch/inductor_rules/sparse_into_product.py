"""A product plus a sparse sum into zeros → the sparse sum accumulated into the product.

    addmm(index_put(zeros, i, u, accumulate), a, b)   ⟶   index_put(mm(a, b), i, u, accumulate)
    add(x, index_put(zeros, i, u, accumulate))        ⟶   index_put(x, i, u, accumulate)      (either order)

This is a tied embedding's gradient: the unembedding's weight gradient (a product, [d_e, N_V]) plus the
embedding lookup's (index_select's backward, a few columns added into zeros of the same size), which
autograd sums. Inductor writes the zeros (154 MB at GPT-2 small), adds the columns in, and then has MKL add
the whole product onto them (addmm with β = 1, slower than the product alone); here the product is written
as it is, and the columns are added into it in place (inductor reinplaces index_put when the product has no
other reader). The tied GPT-2 small step does 0.16 s less work a step this way: the zeros' kernel (61 ms),
addmm's extra over mm (50 ms), and a 154 MB copy that AccumulateGrad made of addmm's result for `.grad` (50 ms),
gone with it (torch's profiler, "Intel(R) Xeon(R) Processor", 2 threads, 2026-11-28).

Exact up to the order of additions: an entry the lookup touched is (Σ u) + (a·b) before and (a·b) + u₁ + u₂ …
after, a different rounding where one token appears more than once in the batch.

Check (why it refuses): the sum must be into zeros made for it, accumulating, of the product's shape and
dtype; addmm must have β = α = 1, add α = 1.
"""

from __future__ import annotations

from typing import Any

import torch

from pseudoformer.backends.torch.inductor_rules.rule import FxRule, aten, emit, erase, shape, zeros_read_once


def _index_put(n: Any) -> bool:
    return isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target is aten.index_put.default


def _sparse_refusal(n: torch.fx.Node) -> str | None:
    """Why the index_put `n` is not a sparse sum into zeros only this sum reads, or None."""
    if not zeros_read_once(n.args[0]):
        return "the index_put is not into zeros made for it"
    if (n.args[3] if len(n.args) > 3 else n.kwargs.get("accumulate", False)) is not True:
        return "the index_put does not accumulate"
    if len(n.users) != 1:
        return "the sparse sum is read elsewhere too"
    return None


def match(n: torch.fx.Node) -> Any:
    if n.target is aten.addmm.default:
        if not _index_put(n.args[0]):
            return None
        if n.kwargs.get("beta", 1) != 1 or n.kwargs.get("alpha", 1) != 1:
            return "addmm with β or α other than 1"
        return _sparse_refusal(n.args[0]) or ("addmm", n.args[0])
    if len(n.args) != 2:
        return None
    for sparse, other in ((n.args[1], n.args[0]), (n.args[0], n.args[1])):
        if not _index_put(sparse):
            continue
        if n.kwargs.get("alpha", 1) != 1:
            return "add with α other than 1"
        if not isinstance(other, torch.fx.Node) or shape(other) != shape(n) or shape(sparse) != shape(n):
            return "the addends are broadcast"
        if other.meta["val"].dtype != n.meta["val"].dtype:
            return "the addends' dtypes differ"
        return _sparse_refusal(sparse) or ("add", sparse, other)
    return None


def rewrite(graph: torch.fx.Graph, n: torch.fx.Node, m: tuple) -> None:
    sparse = m[1]
    _, indices, values = sparse.args[:3]
    dense = emit(graph, n, aten.mm.default, n.args[1], n.args[2]) if m[0] == "addmm" else m[2]
    n.replace_all_uses_with(emit(graph, n, aten.index_put.default, dense, indices, values, True))
    erase(graph, n, sparse, sparse.args[0])


RULE = FxRule("sparse_into_product", (aten.addmm.default, aten.add.Tensor), match, rewrite)
