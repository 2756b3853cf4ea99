"""The CPU concatenation of two tensors (backends/tvm/concat_kernel.py, lowerings/movement.py): two row copies.

The kernel against numpy on either path (serial below parallel_gate.MIN_ELEMENTS, split above), for float32
and int64; the lowering on every axis of a rank-4 tensor with symbolic sizes, through the TVM backend against
the interpreter; and a decode step's cache append runs it, not TVM's select-per-element concatenation."""

from __future__ import annotations

import numpy as np
import pytest
import tvm_util  # noqa: F401  (skips without TVM)

from pseudoformer.backends.tvm.build import compile_graph, make_target
from pseudoformer.backends.tvm.concat_kernel import concat2_func
from pseudoformer.backends.tvm.parallel_gate import MIN_ELEMENTS
from pseudoformer.ir import Graph, Node, Op
from pseudoformer.ir.interpreter import run
from pseudoformer.ir.types import DType, TensorType

tvm = pytest.importorskip("tvm")


@pytest.mark.parametrize("dtype", ["float32", "int64"])
@pytest.mark.parametrize("rows", [3, MIN_ELEMENTS // 64 + 5], ids=["serial", "parallel"])
def test_the_kernel_copies_both_operands_row_by_row(dtype: str, rows: int) -> None:
    lib = tvm.compile(tvm.IRModule({"main": concat2_func(dtype, 2, 1)}), target=make_target("llvm"))
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((rows, 48)) * 100).astype(dtype)
    b = (rng.standard_normal((rows, 17)) * 100).astype(dtype)
    out = tvm.runtime.tensor(np.zeros((rows, 65), dtype))
    lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), out)
    np.testing.assert_array_equal(out.numpy(), np.concatenate([a, b], axis=1))


def _graph(axis: int) -> Graph:
    shape_a: list[int | str] = ["batch", 3, "past", 8]
    shape_b: list[int | str] = ["batch", 3, "past", 8]
    shape_b[axis] = 2 if axis != 2 else "seq"
    a = Node(Op.INPUT, (), {"name": "a"}, type=TensorType(DType.float32, tuple(shape_a)))
    b = Node(Op.INPUT, (), {"name": "b"}, type=TensorType(DType.float32, tuple(shape_b)))
    y = Node(Op.CONCAT, (a, b), {"axis": axis})
    return Graph(inputs=[a, b], outputs=[("y", y)])


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1])
def test_concat_on_any_axis_matches_the_interpreter(axis: int) -> None:
    graph = _graph(axis % 4)
    model = compile_graph(graph, {})
    rng = np.random.default_rng(axis + 4)
    shape_b = [2, 3, 5, 8]
    shape_b[axis % 4] = 2 if axis % 4 != 2 else 1
    feed = {"a": rng.standard_normal((2, 3, 5, 8)).astype(np.float32),
            "b": rng.standard_normal(shape_b).astype(np.float32)}
    np.testing.assert_array_equal(model.run(feed)["y"], run(graph, feed, {})["y"])
    assert model.call_counts(feed).get("concat2_float32") == 1
