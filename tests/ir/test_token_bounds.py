"""Token bounds (ir/token_bounds.py): the inputs a graph gathers from directly, and the rows they may index;
the one check every runtime (run, generate, the API, a compiled TVM module) makes of them."""

from __future__ import annotations

import numpy as np

from pseudoformer.ir import DType, Graph, Node, Op, TensorType
from pseudoformer.ir.token_bounds import out_of_range, token_bounds


def _leaf(op: Op, name: str, dtype: DType, *shape: int | str) -> Node:
    return Node(op, (), {"name": name, "type": TensorType(dtype, shape)})


def test_the_smallest_table_an_input_indexes_bounds_it() -> None:
    ids = _leaf(Op.INPUT, "ids", DType.int64, "batch", "seq")
    other = _leaf(Op.INPUT, "other", DType.int64, "batch", "seq")
    W_e, W_t = _leaf(Op.PARAM, "W_e", DType.float32, 8, 11), _leaf(Op.PARAM, "W_t", DType.float32, 7, 8)
    by_ids = Node(Op.GATHER, (W_e, ids), {"axis": 1})  # 11 tokens along the columns
    by_ids_too = Node(Op.GATHER, (W_t, ids), {"axis": -2})  # and 7 along the rows
    computed = Node(Op.GATHER, (W_t, Node(Op.ADD, (other, other))), {"axis": 0})  # not an input: no bound
    g = Graph([ids, other], [("a", by_ids), ("b", by_ids_too), ("c", computed)])
    assert token_bounds(g) == {"ids": 7}


def test_ids_out_of_range_are_named_with_the_vocabulary() -> None:
    assert out_of_range("x", np.array([[0, 49]]), 50) is None
    assert out_of_range("x", np.zeros((2, 0), np.int64), 50) is None
    assert out_of_range("x", np.array([3, 60, 51]), 50) == ("token id 60 in x is out of range: the model's "
                                                           "vocabulary has 50 tokens (ids 0 to 49)")
    assert out_of_range("x", np.array([3, -1, 60]), 50).startswith("token id -1 in x")  # type: ignore[union-attr]
