"""Run a small .alg program on the numpy interpreter and on ONNX Runtime (-O2), which must agree.

The tests of the notation's arithmetic (mod, ⌊⌋, ⌈⌉, real powers, conditions, real arguments)
compare what this returns with numpy written from the formula.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pseudoformer.backends.onnx import OnnxRunner
from pseudoformer.deploy import lower
from pseudoformer.model import Model, load


def write(tmp_path: Path, source: str, name: str = "prog.alg") -> Path:
    path = tmp_path / name
    path.write_text(source, encoding="utf-8")
    return path


def compile_source(tmp_path: Path, source: str, **hyper: float | int) -> Model:
    return load(write(tmp_path, source), defines=[f"{k}={v}" for k, v in hyper.items()])


def run_both(model: Model, **inputs: np.ndarray) -> dict[str, np.ndarray]:
    """The interpreter's outputs, after checking that ONNX Runtime computes the same to 1e-5."""
    want = model.run(**inputs)
    got = OnnxRunner(lower(model, opt_level=2)).run(inputs)
    assert list(got) == list(want)
    for name, w in want.items():
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5, err_msg=name)
    return want
