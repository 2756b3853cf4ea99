"""SCATTER: slices replaced at int64 positions, positions per row of a batch, and the positions it refuses."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.ir import DType, Node, Op, TensorType
from pseudoformer.ir.ops import EvalError, IRTypeError, op_def

F32, I64 = DType.float32, DType.int64


def _inp(name: str, dtype: DType, *shape: int | str) -> Node:
    return Node(Op.INPUT, (), {"name": name, "type": TensorType(dtype, tuple(shape))})


def _scatter(data: np.ndarray, idx: np.ndarray, upd: np.ndarray, axis: int) -> np.ndarray:
    n = Node(Op.SCATTER, (_inp("d", F32, *data.shape), _inp("i", I64, *idx.shape), _inp("u", F32, *upd.shape)),
             {"axis": axis})
    return op_def(Op.SCATTER).impl(n, [data, idx, upd])


def test_slices_are_replaced_at_the_positions() -> None:
    data = np.zeros((2, 4), np.float32)
    upd = np.arange(4, dtype=np.float32).reshape(2, 2)
    out = _scatter(data, np.array([3, 0]), upd, axis=1)
    np.testing.assert_array_equal(out, [[1, 0, 0, 0], [3, 0, 0, 2]])
    assert not data.any()  # the operand is not written


def test_positions_per_row() -> None:
    data = np.zeros((2, 3, 4), np.float32)
    upd = np.ones((2, 3, 1), np.float32)
    out = _scatter(data, np.array([[2], [0]]), upd, axis=2)
    assert out[0, :, 2].all() and out[1, :, 0].all() and out.sum() == 6


@pytest.mark.parametrize("idx", [[-1, 0], [4, 0], [1, 1]])
def test_negative_past_the_end_and_repeated_positions_are_refused(idx: list[int]) -> None:
    with pytest.raises(EvalError):
        _scatter(np.zeros((2, 4), np.float32), np.array(idx), np.zeros((2, 2), np.float32), axis=1)


def test_the_shapes_must_fit() -> None:
    with pytest.raises(IRTypeError, match="do not fit"):
        Node(Op.SCATTER, (_inp("d", F32, 2, 4), _inp("i", I64, 3), _inp("u", F32, 2, 2)), {"axis": 1})
