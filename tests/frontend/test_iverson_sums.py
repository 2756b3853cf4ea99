"""A sum of Iverson brackets counts: Σ_k [[j = 2k]] is a number, never a bool reduction."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.ir import DType, Node, Op, TensorType
from pseudoformer.ir.ops import IRTypeError
from pseudoformer.model import load

SOURCE = """Algorithm: c ← count(x)
  Input: x ∈ ℝ^{n}
  Output: c ∈ ℝ^{n}
  Hyperparameters: n ∈ ℕ
  1 for j ∈ [n] : c[j] ← Σ_{k=1}^{n} [[j = 2k]] + Σ_{k=1}^{n} [[k ≤ j]]
  2 return c
"""


def test_sums_of_brackets_count(tmp_path) -> None:
    path = tmp_path / "count.alg"
    path.write_text(SOURCE, encoding="utf-8")
    model = load(path, defines=["n=6"])
    got = model.run(x=np.zeros((1, 6), np.float32))["c"]
    j = np.arange(1, 7)
    np.testing.assert_array_equal(got, (j % 2 == 0).astype(np.float32) + j)


def test_the_ir_refuses_a_bool_sum() -> None:
    b = Node(Op.INPUT, (), {"name": "m", "type": TensorType(DType.bool, (3,))})
    with pytest.raises(IRTypeError, match="cast to a number"):
        Node(Op.REDUCE_SUM, (b,), {"axes": [0], "keepdims": False})
