"""Every pass keeps semantics: each model of models/ runs on the interpreter before and after every pass
of the -O2 pipeline, with the IR verified in between."""

from __future__ import annotations

import os

import numpy as np
import pytest

from pseudoformer.ir.interpreter import run
from pseudoformer.model import load
from pseudoformer.optimize import trace
from tests.models.test_golden_ir import CASES


def _inputs(graph, batch: int, seq: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feed = {}
    for n in graph.inputs:
        shape = [batch if d == "batch" else seq if isinstance(d, str) else d for d in n.type.shape]
        if n.type.dtype.value == "int64":
            feed[n.attrs["name"]] = rng.integers(0, 5, size=shape)
        elif n.type.dtype.value == "bool":
            m = rng.random(shape) < 0.7
            m[..., 0] = True  # every query attends somewhere, else its softmax is nan by definition
            feed[n.attrs["name"]] = m
        else:
            feed[n.attrs["name"]] = rng.standard_normal(shape).astype(np.float32)
    return feed


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_pass_keeps_semantics(name: str) -> None:
    source, entry, hyper = CASES[name]
    model = load(source, entry=entry, config=os.devnull, defines=[f"{k}={v}" for k, v in hyper.items()])
    feeds = [_inputs(model.graph, b, s, seed=b + s) for b, s in ((2, 5), (1, 1), (3, 7))]
    want = [run(model.graph, f, model.weights) for f in feeds]
    steps = trace(model.graph, 2)  # verifies the IR after every pass
    assert steps, "the -O2 pipeline ran no pass"
    for p, g in steps:
        for f, w in zip(feeds, want, strict=True):
            got = run(g, f, model.weights)
            for k in w:
                np.testing.assert_allclose(got[k], w[k], rtol=1e-5, atol=1e-5, err_msg=f"{name} after {p.name}")
