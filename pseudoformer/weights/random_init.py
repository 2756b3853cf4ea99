"""Seeded random weights, for running and testing a compiled model without a checkpoint.

Every tensor is drawn from N(0, 0.02^2) (GPT-2/BERT's initializer scale), except layer-norm gains
(names whose last dotted component starts with ``gamma``), which are 1 + N(0, 0.02^2). Biases
and layer-norm shifts are deliberately *not* zero, and gains not exactly one: a bias added on the
wrong axis or a dropped layer-norm term must change the output for tests to notice it.

Names are visited in sorted order and each draws from one shared generator, so the result
depends only on (expected, seed), not on dict order.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

STD = 0.02


def random_weights(
    expected: Mapping[str, tuple[tuple[int, ...], str]], seed: int = 0
) -> dict[str, np.ndarray]:
    """One contiguous array per expected name, of its shape and dtype."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name in sorted(expected):
        shape, dtype = expected[name]
        draw = rng.normal(0.0, STD, size=tuple(shape))
        if name.rsplit(".", 1)[-1].startswith("gamma"):
            draw += 1.0
        out[name] = np.ascontiguousarray(draw, dtype=np.dtype(dtype))
    return out
