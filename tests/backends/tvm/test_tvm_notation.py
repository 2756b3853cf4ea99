"""The notation's arithmetic on TVM: mod, ⌊⌋, ⌈⌉, a sum bounded by ⌈ℓ/2⌉ (a size the graph computes), real
powers and parenthesised conditions, compiled once at -O2 and run at two lengths against the interpreter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tvm_util import BACKENDS  # noqa: F401  (skips this module without TVM)

from pseudoformer.backends.tvm import compile_graph
from pseudoformer.model import load
from pseudoformer.optimize import optimize
from tests.frontend.test_conditions import WINDOW
from tests.frontend.test_integer_arithmetic import STRIDED, SUMS, VALUES
from tests.frontend.test_real_powers import ANGLES, POSITIONS

PROGRAMS = {
    "values": (VALUES.replace("10⁴", "10000"), ["s=3"], lambda rng, n: {"x": rng.standard_normal((2, n))}),
    "sums": (SUMS, ["n=7"], lambda rng, n: {"x": rng.standard_normal((2, n))}),
    "strided": (STRIDED, ["d=2", "s=3"], lambda rng, n: {"X": rng.standard_normal((2, n, 2))}),
    "window": (WINDOW, ["d=2", "w=3"], lambda rng, n: {"X": rng.standard_normal((1, n, 2))}),
    "powers": (POSITIONS, [], lambda rng, n: {"x": rng.standard_normal((2, n))}),
    "angles": (ANGLES, ["d=6", "b=100.0"], lambda rng, n: {"x": rng.standard_normal((2, 6))}),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_tvm_computes_what_the_interpreter_does(name: str, tmp_path: Path) -> None:
    source, defines, feeds = PROGRAMS[name]
    path = tmp_path / f"{name}.alg"
    path.write_text(source, encoding="utf-8")
    model = load(path, defines=defines)
    compiled = compile_graph(optimize(model.graph, 2), model.weights)
    rng = np.random.default_rng(5)
    for n in (2, 7):
        inputs = {k: v.astype(np.float32) for k, v in feeds(rng, n).items()}
        want = model.run(**inputs)
        got = compiled.run(inputs)
        for out, w in want.items():
            np.testing.assert_allclose(got[out], w, rtol=1e-5, atol=1e-4, err_msg=f"{name}: {out} at ℓ = {n}")
