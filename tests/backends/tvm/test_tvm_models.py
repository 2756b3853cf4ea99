"""Every model in models/, hand-built graphs and every IR op's example, each compiled once by TVM and run at
several sizes.

The numpy interpreter is the oracle: one compiled module per entry and level must agree with it to
1e-4 at every batch and sequence length, which is what its symbolic dims promise.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from tvm_util import BACKENDS  # noqa: F401  (skips this module without TVM, and finds the cases)

from onnx_cases import SIZES, block, block_inputs, block_params, structure, structure_inputs  # isort: skip
from test_onnx_models import CASES, _louder  # isort: skip

from pseudoformer.backends.tvm import compile_graph
from pseudoformer.ir import interpreter
from pseudoformer.ir.examples import every_example
from pseudoformer.model import load
from pseudoformer.optimize import optimize

TOL = 1e-4


def _assert_close(got: dict[str, np.ndarray], want: dict[str, np.ndarray], what: str) -> None:
    assert list(got) == list(want)
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what} {name}: {g.dtype}{g.shape} != {w.dtype}{w.shape}"
        if w.dtype.kind == "f":
            err = np.abs(g.astype(np.float64) - w).max() if w.size else 0.0
            assert err <= TOL, f"{what} {name}: max abs error {err:.3g}"
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{what} {name}")


# -O0 lowers the paper's dataflow op by op; -O2 after the passes. Args mode keeps compiles short;
# the other mode (weights bound as constants) is what test_tvm_deploy exercises.
@pytest.fixture(scope="module", params=[(name, level) for name in sorted(CASES) for level in (0, 2)],
                ids=lambda p: f"{p[0]}-O{p[1]}")
def compiled(request: pytest.FixtureRequest) -> tuple:
    name, level = request.param
    case = CASES[name]
    model = load(case.source, entry=case.entry, config=os.devnull,
                 defines=[f"{k}={v}" for k, v in case.hyper.items()])
    weights = _louder(model.weights, seed=len(name))
    graph = optimize(model.graph, level)
    return case, graph, weights, compile_graph(graph, weights, tvm_params="args")


def test_every_size_from_one_module_matches_the_interpreter(compiled: tuple) -> None:
    case, graph, weights, tvm_model = compiled
    for size in case.sizes:
        feeds = case.feeds(np.random.default_rng(sum(size)), size)
        want = interpreter.run(graph, feeds, weights)
        assert all(np.isfinite(w).all() for w in want.values())
        _assert_close(tvm_model.run(feeds), want, f"at {size}")


EXAMPLES = every_example()
GRAPHS = {
    "block": (block, block_params, block_inputs),
    "structure": (structure, lambda: {}, structure_inputs),
    # every op, on its own example (OpDef.example): a new op is tested here without an edit
    "examples": (lambda: EXAMPLES.graph, lambda: EXAMPLES.params, lambda b, s: EXAMPLES.feeds(b, s)),
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_hand_built_graphs_match_the_interpreter(name: str) -> None:
    make, params, inputs = GRAPHS[name]
    graph, weights = make(), params()
    tvm_model = compile_graph(graph, weights, tvm_params="args")
    for batch, seq in SIZES:
        feeds = inputs(batch, seq)
        _assert_close(tvm_model.run(feeds), interpreter.run(graph, feeds, weights), f"at {(batch, seq)}")
