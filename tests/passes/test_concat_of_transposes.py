"""passes/rules/concat_of_transposes.py (the "torch" pipeline): a concat of transposes with one permutation
becomes the transpose of the concat, computing the same; mixed permutations are left alone."""

from __future__ import annotations

import numpy as np

from pseudoformer.ir import DType, Graph, Node, Op, TensorType
from pseudoformer.ir.interpreter import run
from pseudoformer.passes.fusions import concat_of_transposes_fusion


def _param(name: str) -> Node:
    return Node(Op.PARAM, (), {"name": name, "type": TensorType(DType.float32, (3, 4))})


def test_the_concat_of_transposes_is_the_transpose_of_the_concat() -> None:
    a, b, c = (_param(n) for n in "abc")
    t = [Node(Op.TRANSPOSE, (w,), {"perm": [1, 0]}) for w in (a, b, c)]
    graph = Graph([], [("y", Node(Op.CONCAT, tuple(t), {"axis": 1})),
                       ("z", Node(Op.CONCAT, (t[0], Node(Op.SLICE, (t[1], Node(Op.CONST, (), {"value": 0, "dtype": DType.int64}),
                                                                    Node(Op.CONST, (), {"value": 3, "dtype": DType.int64})),
                                                         {"axis": 1, "dim": 3})), {"axis": 1}))], {})
    out, changed = concat_of_transposes_fusion(graph)
    assert changed
    y = dict(out.outputs)["y"]
    assert y.op is Op.TRANSPOSE and y.src[0].op is Op.CONCAT and y.src[0].attrs["axis"] == 0
    assert dict(out.outputs)["z"].op is Op.CONCAT  # one operand is no transpose: left alone
    rng = np.random.default_rng(0)
    params = {n: rng.standard_normal((3, 4)).astype(np.float32) for n in "abc"}
    want, got = run(graph, {}, params), run(out, {}, params)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
