"""Where the TVM backend's numbers could part from the interpreter's: NaN, ±inf, and indices out of range.

The fast exp, erf and softmax of fastmath.py clamp their argument; NaN must still come out NaN, so
that a query that may attend to nothing gives a NaN row as the interpreter does (its softmax is 0/0).
A gather index computed in the graph, out of range, is an error at run time, as it is on the
interpreter (IndexError) and ONNX Runtime (its Gather's error), never a read past the table.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
from tvm_util import BACKENDS  # noqa: F401  (skips this module without TVM, and finds the cases)

from onnx_cases import BOOL, F32, I64, const, inp, op, param  # isort: skip
from test_onnx_models import CASES  # isort: skip

from pseudoformer.backends.tvm import BackendError, compile_graph
from pseudoformer.base.errors import UsageError
from pseudoformer.cli import main
from pseudoformer.deploy_tvm import run_library
from pseudoformer.ir import interpreter
from pseudoformer.ir.graph import Graph
from pseudoformer.ir.ops import Op
from pseudoformer.model import load
from pseudoformer.optimize import optimize

TOL = 1e-4


def _reference(graph: Graph, feeds: dict[str, np.ndarray], weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with np.errstate(invalid="ignore", over="ignore"):
        return interpreter.run(graph, feeds, weights)


def _assert_same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape, what
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaN where the interpreter has none, "
                                  "or a number where it has NaN")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=TOL, equal_nan=True, err_msg=what)


@pytest.mark.parametrize("level", [0, 2])
def test_a_query_that_may_attend_to_nothing_gives_nan_as_in_the_interpreter(level: int) -> None:
    """Algorithm 4 with a mask column that is all 0: -O0 is where + softmax, -O2 one attention op."""
    case = CASES["alg4_attention"]
    model = load(case.source, entry=case.entry, config=os.devnull,
                 defines=[f"{k}={v}" for k, v in case.hyper.items()])
    graph = optimize(model.graph, level)
    compiled = compile_graph(graph, model.weights)
    for size in [(2, 16, 16), (1, 7, 9), (3, 33, 5)]:
        feeds = case.feeds(np.random.default_rng(sum(size)), size)
        feeds["Mask"][1, :] = False  # query 1 may see no key
        want = _reference(graph, feeds, model.weights)["V_tilde"]
        assert np.isnan(want[:, 1]).all() and np.isfinite(np.delete(want, 1, axis=1)).all()
        _assert_same(compiled.run(feeds)["V_tilde"], want, f"-O{level} at {size}")


@pytest.mark.parametrize("width", [7, 16, 64])  # scalar tail only, whole AVX2 vectors, several
def test_nan_and_infinities_through_exp_erf_tanh_gelu_and_softmax(width: int) -> None:
    x = inp("x", F32, "batch", "seq", width)
    keep = inp("keep", BOOL, "batch", "seq", width)
    masked = op(Op.WHERE, keep, x, const(-math.inf))
    outs = {
        "exp": op(Op.EXP, x), "erf": op(Op.ERF, x), "tanh": op(Op.TANH, x),
        "gelu": op(Op.GELU, x, approximate="none"), "gelu_tanh": op(Op.GELU, x, approximate="tanh"),
        "softmax": op(Op.SOFTMAX, x, axis=-1), "masked_softmax": op(Op.SOFTMAX, masked, axis=-1),
    }
    graph = Graph([x, keep], list(outs.items()), {"entry": "Special"})
    rng = np.random.default_rng(width)
    xv = rng.standard_normal((2, 4, width)).astype(np.float32) * 4
    special = np.array([-np.inf, np.nan, np.inf, 0.0, -100.0, 100.0, 89.0, -89.0], np.float32)
    xv[0, 0] = np.resize(special, width)  # every special value, in every lane position over the rows
    xv[0, 1] = np.roll(np.resize(special, width), 3)
    xv[1, 2] = -np.inf  # a row that is all -inf: softmax is NaN
    kv = rng.random((2, 4, width)) < 0.6
    kv[1, 1] = False  # a row with every entry masked
    feeds = {"x": xv, "keep": kv}
    got, want = compile_graph(graph, {}).run(feeds), _reference(graph, feeds, {})
    assert np.isnan(want["masked_softmax"][1, 1]).all() and np.isnan(want["softmax"][1, 2]).all()
    for name in outs:
        _assert_same(got[name], want[name], f"{name}, width {width}")


def _shifted_gather() -> tuple[Graph, dict[str, np.ndarray]]:
    """y = W[x + 1]: an index the graph computes, which no input check can see."""
    x = inp("x", I64, "batch", "seq")
    y = op(Op.GATHER, param("W", 5, 3), op(Op.ADD, x, const(1, I64)), axis=0)
    return Graph([x], [("y", y)], {"entry": "Shifted"}), {"W": np.arange(15, dtype=np.float32).reshape(5, 3)}


def test_a_computed_gather_index_out_of_range_is_an_error_not_a_read_past_the_table() -> None:
    graph, weights = _shifted_gather()
    compiled = compile_graph(graph, weights)
    for ok in ([[0, 1, 3]], [[-6, 3]]):  # negative indices count from the end, as in numpy and ONNX
        x = np.array(ok)
        np.testing.assert_array_equal(compiled.run({"x": x})["y"], interpreter.run(graph, {"x": x}, weights)["y"])
    for bad, shown in (([[0, 4]], "from 1 to 5"), ([[-7, 0]], "from -6 to 1")):
        with pytest.raises(BackendError, match=f"gather at .*indices {shown}, out of range for an axis of size 5"):
            compiled.run({"x": np.array(bad)})


def test_a_computed_index_out_of_range_is_the_usage_error_the_cli_prints(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph, weights = _shifted_gather()
    so = compile_graph(graph, weights).save(tmp_path / "shifted.so")
    with pytest.raises(UsageError, match="indices from 1 to 5, out of range"):
        run_library(so, {"x": np.array([[0, 4]])})
    out = tmp_path / "y.npz"
    assert main(["run", str(so), "--input", "x=[[0, 1, 2, 3]]", "-o", str(out)]) == 0
    assert main(["run", str(so), "--input", "x=[[0, 4]]", "-o", str(tmp_path / "bad.npz")]) == 1
    err = capsys.readouterr().err
    assert "indices from 1 to 5, out of range for an axis of size 5" in err and "Traceback" not in err
    assert not (tmp_path / "bad.npz").exists()
