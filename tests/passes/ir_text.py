"""Pass tests as Before/Expected IR text, as TVM's Relax pass tests are written.

`check_rewrite(pass_fn, BEFORE, EXPECTED)` parses BEFORE (ir.parse), runs the pass, and asserts that the
result prints exactly as EXPECTED does (both renumbered by the printer, locations left out), then holds
the rewrite to its numbers: the graph before and after give the same outputs on the interpreter.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable

import numpy as np

from pseudoformer import ir
from pseudoformer.ir import DType, Graph
from pseudoformer.ir.interpreter import run
from pseudoformer.ir.printer import format_graph
from pseudoformer.ir.verify import verify

SIZES = {"batch": 2, "seq": 5, "past": 3}


def text(graph: Graph) -> str:
    return format_graph(graph, with_locations=False)


def check_rewrite(pass_fn: Callable[[Graph], tuple[Graph, bool]], before: str, expected: str, *,
                  sizes: dict[str, int] | None = None, tol: float = 1e-6, seed: int = 0) -> Graph:
    g = ir.parse(textwrap.dedent(before))
    verify(g)
    got, changed = pass_fn(g)
    verify(got)
    want = ir.parse(textwrap.dedent(expected))
    assert text(got) == text(want), f"the pass gave\n{text(got)}\nnot\n{text(want)}"
    assert changed == (text(got) != text(g))
    assert_same_outputs(g, got, sizes=sizes, tol=tol, seed=seed)
    return got


def random_feed(graph: Graph, sizes: dict[str, int] | None = None, seed: int = 0,
                ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Inputs and weights for `graph`: floats of unit scale, token-like ints, masks with a true diagonal."""
    rng = np.random.default_rng(seed)
    dims = {**SIZES, **(sizes or {})}

    def value(t: ir.TensorType) -> np.ndarray:
        shape = tuple(dims[d] if isinstance(d, str) else d for d in t.shape)
        if t.dtype is DType.bool:
            keep = rng.random(shape) < 0.7
            if len(shape) >= 2:
                keep |= np.eye(shape[-2], shape[-1], dtype=bool)  # every query sees some key
            return keep
        if t.dtype is DType.int64:
            return rng.integers(0, 5, shape)
        return rng.standard_normal(shape).astype(t.dtype.value)

    return ({n.attrs["name"]: value(n.type) for n in graph.inputs},
            {p.attrs["name"]: value(p.type) for p in graph.params()})


def assert_same_outputs(before: Graph, after: Graph, *, sizes: dict[str, int] | None = None, tol: float = 1e-6,
                        seed: int = 0) -> None:
    feed, weights = random_feed(before, sizes, seed)
    want = run(before, feed, weights)
    got = run(after, {k: v for k, v in feed.items() if k in {n.attrs["name"] for n in after.inputs}},
              {k: v.astype(p.dtype.value) for p in after.params() for k, v in weights.items() if k == p.attrs["name"]})
    assert list(got) == list(want)
    for name in want:
        np.testing.assert_allclose(np.asarray(got[name], np.float64), np.asarray(want[name], np.float64),
                                   rtol=tol, atol=tol, err_msg=name)
