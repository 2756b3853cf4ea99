"""The masks of a model's random draws (dropout, frontend/draws.py) for a training step: each draw is an input
`draw_<k>` of the loss graph, float32 [batch, …], 1 where its first choice is taken (with probability p, the
graph's meta["draws"]), drawn for the step's batch b (from 0) of epoch e (from 0) as

    np.random.default_rng([0x64726F70, seed, e, b, k]).random(shape) < p

one uniform draw per entry in row-major order, so that another framework replays them. Drawn for a whole
optimizer step (all its micro-batches, --grad-accum), as the masks of one batch of that size. The validation
loss is the model's at inference: each draw its expectation, the mask filled with p.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pseudoformer.base.errors import UsageError
from pseudoformer.ir import Graph

# The first word of the draws' seed, so that they never share a stream with the shuffle's or the masking's.
DRAW_STREAM = 0x64726F70  # "drop"


def draw_masks(graph: Graph, feeds: Mapping[str, np.ndarray], seed: int, epoch: int, batch: int, *,
               expectation: bool = False) -> dict[str, np.ndarray]:
    """Each draw input's mask for the batch `feeds` (see the module's docstring); with `expectation`, each
    filled with its probability instead."""
    probabilities = graph.meta.get("draws") or {}
    if not probabilities:
        return {}
    sizes: dict[str, int] = {}
    for node in graph.inputs:  # the symbolic sizes (batch, seq) as the data's arrays have them
        name = node.attrs["name"]
        if name in feeds:
            sizes.update({d: n for d, n in zip(node.type.shape, np.shape(feeds[name]), strict=True) if isinstance(d, str)})
    out = {}
    for k, (name, p) in enumerate(probabilities.items()):
        dims = graph.input(name).type.shape
        unknown = [d for d in dims if isinstance(d, str) and d not in sizes]
        if unknown:
            raise UsageError(f"the random draw {name} is over a value of size {', '.join(unknown)}, which no input "
                             "of the data fixes")
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in dims)
        if expectation:
            out[name] = np.full(shape, p, np.float32)
        else:
            out[name] = (np.random.default_rng([DRAW_STREAM, seed, epoch, batch, k]).random(shape) < p
                         ).astype(np.float32)
    return out
