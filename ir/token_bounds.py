"""Which inputs a graph uses as indices into a table of fixed size (token ids into W_e), and that size.

Every runtime checks such an input before a run: an ONNX Gather or a compiled TVM take would wrap an
index out of range (or crash) where the interpreter raises, so `run`, `generate` and the Python API
refuse the id with one message (pseudoformer/inputs.py), and a compiled TVM module keeps the bounds in
its metadata to check them itself (backends/tvm/build.py).
"""

from __future__ import annotations

import numpy as np

from pseudoformer.ir.graph import Graph
from pseudoformer.ir.ops import Op


def token_bounds(graph: Graph) -> dict[str, int]:
    """Inputs gathered from directly, by name, and the smallest size of an axis they index."""
    bounds: dict[str, int] = {}
    for n in graph.nodes():
        if n.op is Op.GATHER and n.src[1].op is Op.INPUT:
            size = n.src[0].shape[n.attrs["axis"] % n.src[0].type.rank]
            if isinstance(size, int):
                name = n.src[1].attrs["name"]
                bounds[name] = min(bounds.get(name, size), size)
    return bounds


def out_of_range(name: str, ids: np.ndarray, vocabulary: int) -> str | None:
    """Why token ids `ids` of input `name` cannot index a table of `vocabulary` rows (0 to vocabulary − 1), or None."""
    if ids.size == 0:
        return None
    lo, hi = ids.min(), ids.max()
    if lo >= 0 and hi < vocabulary:
        return None
    bad = lo if lo < 0 else hi
    return (f"token id {int(bad)} in {name} is out of range: the model's vocabulary has {vocabulary} "
            f"tokens (ids 0 to {vocabulary - 1})")
