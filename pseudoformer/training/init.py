"""`--init`: the parameters training starts from when no checkpoint gives them.

- `normal` (the default): load's seeded init (weights/random_init.py), N(0, 0.02²) for every tensor and
  1 + N(0, 0.02²) for the norms' gains: nonzero biases, so that a test notices a bias on the wrong axis.
- `gpt2`: GPT-2's (and the paper's GPT-2 setting's) init: matrices N(0, 0.02²); the projections that write
  into the residual stream, the attention output `W_o` and the MLP's down projection (`W_mlp2` in gpt2.alg
  and bert.alg, `W_2` in llama.alg and its kin), N(0, (0.02/√(2L))²) with L the number of layers
  (`layers.N` groups); biases and norms' offsets (names starting `b` or `beta`) 0; norms' gains
  (`gamma…`) 1. Names are visited in sorted order with one generator seeded by --seed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import numpy as np

from pseudoformer.base.errors import UsageError
from pseudoformer.weights.random_init import STD

INITS = ("normal", "gpt2")
RESIDUAL = ("W_o", "W_mlp2", "W_2")


def gpt2_init(weights: Mapping[str, np.ndarray], seed: int) -> tuple[dict[str, np.ndarray], list[str]]:
    """GPT-2's init over the names and shapes of `weights`; and the names scaled as residual projections."""
    layers = {m.group(1) for name in weights for m in [re.search(r"(?:^|\.)layers\.(\d+)\.", name)] if m}
    depth = max(len(layers), 1)
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    scaled = []
    for name in sorted(weights):
        shape, last = np.shape(weights[name]), name.rsplit(".", 1)[-1]
        if last.startswith("gamma"):
            value = np.ones(shape)
        elif last.startswith(("b", "beta")) and len(shape) <= 1:
            value = np.zeros(shape)
        elif last in RESIDUAL:
            value = rng.normal(0.0, STD / math.sqrt(2 * depth), size=shape)
            scaled.append(name)
        else:
            value = rng.normal(0.0, STD, size=shape)
        out[name] = np.ascontiguousarray(value, dtype=np.float32)
    if not scaled:
        raise UsageError(f"--init gpt2 found no residual projection ({', '.join(RESIDUAL)}) among the model's "
                         "parameters: use --init normal")
    return out, scaled
