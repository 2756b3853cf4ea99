"""Parameters a checkpoint ties, found by their values and read as one.

Llama's W_u is a parameter of its own (mistral.alg, qwen2.alg likewise); a checkpoint with
tie_word_embeddings gives it the embedding's values, W_u = W_eᵀ. Kept as two parameters, the
embedding is held twice and stored twice in every compiled file (Qwen2.5-0.5B: 0.54 GB of its
2.5 GB fp32 file). Where two matrices hold the same values one transposed of the other, the graph
reads the second as the transpose of the first (GPT-2's form, `W_eᵀ X`), and only the first is kept:
every pass and backend then sees a weight read in two ways (quantize.py's tied embedding among them).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pseudoformer.ir import Graph, Node, Op
from pseudoformer.ir.lazy_tensor import LazyTensor, materialize
from pseudoformer.passes.rebuild import rebuild

_ROWS = 1024  # rows compared at a time: no temporary the size of the matrix


def transposed_twins(params: Mapping[str, np.ndarray | LazyTensor]) -> dict[str, str]:
    """{name: the earlier name whose transpose it equals}, for 2-d float parameters.

    A LazyTensor is loaded only when another parameter has its shape transposed, and only the pair
    compared is held: the lazy weights of a streaming compile stay one or two tensors in memory."""
    mats = [(k, v) for k, v in params.items() if getattr(v, "ndim", 0) == 2 and v.shape[0] != v.shape[1]]
    twins: dict[str, str] = {}
    for i, (first, a) in enumerate(mats):
        for second, b in mats[i + 1:]:
            if second in twins or first in twins or b.shape != a.shape[::-1] or b.dtype != a.dtype:
                continue
            x, y = materialize(a), materialize(b)
            if not np.array_equal(x[0], y[:, 0]):  # cheap refusal: untied or random weights differ at once
                continue
            if all(np.array_equal(x[r:r + _ROWS], y[:, r:r + _ROWS].T) for r in range(0, x.shape[0], _ROWS)):
                twins[second] = first
    return twins


Params = dict[str, np.ndarray | LazyTensor]


def tie(graph: Graph, params: Params, twins: Mapping[str, str] | None = None) -> tuple[Graph, Params]:
    """The graph reading each transposed twin as the transpose of its first, and the weights without the twins.

    `twins` ({second: first}): the ties already known without reading values (hf_engine.Plan's, from
    the checkpoint's mapping); None compares the values."""
    twins = transposed_twins(params) if twins is None else twins
    if not twins:
        return graph, params
    firsts = {p.attrs["name"]: p for p in graph.params() if p.attrs["name"] in twins.values()}

    def replace(n: Node, _src: tuple[Node, ...]) -> Node | None:
        if n.op is Op.PARAM and n.attrs["name"] in twins:
            first = firsts[twins[n.attrs["name"]]]
            return Node.at(n, Op.TRANSPOSE, (first,), {"perm": [1, 0]})
        return None

    tied, _ = rebuild(graph, replace)
    return tied, {k: v for k, v in params.items() if k not in twins}
