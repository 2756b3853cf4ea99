"""The op registry: every op is defined once, with everything the stages ask of it."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.ir import DType, Node, Op, TensorType
from pseudoformer.ir.examples import every_example, example
from pseudoformer.ir.interpreter import run
from pseudoformer.ir.ops import OPS, REQUIRED, Attr, IRTypeError, OpDef, attr_problem, op_def
from pseudoformer.ir.ops.registry import ATTR_KINDS, register
from pseudoformer.ir.verify import verify
from pseudoformer.passes.layout import RULES

F32 = DType.float32
LAYOUTS = set(RULES)
PRECISIONS = {"anchor", "follower", "half"}
SIZES = [(1, 1), (2, 5), (3, 8)]  # (batch, seq)


def test_every_op_is_defined_once_with_its_rules() -> None:
    assert set(OPS) == set(Op)
    for op, d in OPS.items():
        assert d.op is op
        assert d.layout in LAYOUTS, f"{op.value}: no layout rule for kind {d.layout!r}"
        assert d.precision in PRECISIONS
        assert all(a.kind in ATTR_KINDS for a in d.attrs), op
        assert len({a.name for a in d.attrs}) == len(d.attrs), op
        assert d.vjp is None or callable(d.vjp)  # which ops have one: tests/training/test_vjp_rules.py
        assert d.example is not None, f"{op.value}: no example (OpDef.example)"
        if d.inline is not None:
            assert d.attr(d.inline) is not None


def test_an_op_cannot_be_registered_twice() -> None:
    with pytest.raises(ValueError, match="defined twice"):
        register(OpDef(Op.ADD, "again", 2, lambda s, a: s[0], lambda n, a: a[0]))


def test_defaults_and_choices_come_from_the_attribute_declarations() -> None:
    gelu = op_def(Op.GELU).attr("approximate")
    assert gelu is not None and gelu.default == "none" and gelu.choices == ("none", "tanh")
    assert op_def(Op.TRANSPOSE).attr("perm").default is REQUIRED  # type: ignore[union-attr]
    assert attr_problem(Op.GELU, gelu, "erf") == "gelu approximate='erf' is not one of ('none', 'tanh')"
    assert attr_problem(Op.CAST, Attr("dtype", "dtype"), "float32") == "cast dtype='float32' is not a DType"
    assert attr_problem(Op.SLICE, Attr("dim", "dim"), "seq") is None


def test_typing_rules_and_arity_are_checked_when_a_node_is_made() -> None:
    x = Node(Op.INPUT, (), {"name": "x", "type": TensorType(F32, ("batch", 3))})
    with pytest.raises(IRTypeError, match="takes 2 operands, got 1"):
        Node(Op.ADD, (x,))
    with pytest.raises(IRTypeError, match="needs a float operand"):
        Node(Op.EXP, (Node(Op.CAST, (x,), {"dtype": DType.int64}),))


@pytest.mark.parametrize("op", list(OPS), ids=lambda op: op.value)
def test_each_example_uses_its_op_and_types_and_runs_at_every_size(op: Op) -> None:
    """The example is what every stage's tests run the op on (ir/examples.py); it must be a graph the
    verifier accepts, with finite results whatever the batch and sequence length."""
    ex = example(op)
    verify(ex.graph)
    assert op in {n.op for n in ex.graph.nodes()}
    for batch, seq in SIZES:
        got = run(ex.graph, ex.feeds(batch, seq), ex.params)
        assert all(np.isfinite(v).all() for v in got.values() if v.dtype.kind == "f"), op.value


@pytest.mark.parametrize("op", [op for op, d in OPS.items() if d.decompose is not None], ids=lambda op: op.value)
def test_each_decomposition_computes_what_its_op_computes(op: Op) -> None:
    """The formula a backend lowers instead of the op (passes/decompose.py) agrees with the op's impl."""
    from pseudoformer.passes.decompose import decompose

    ex = example(op)
    lowered, changed = decompose(ex.graph, accepts=lambda n: n.op is not op)
    verify(lowered)
    assert changed and op not in {n.op for n in lowered.nodes()}
    for batch, seq in SIZES:
        feed = ex.feeds(batch, seq)
        want, got = run(ex.graph, feed, ex.params), run(lowered, feed, ex.params)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6, err_msg=name)


def test_every_example_fits_in_one_graph() -> None:
    """The backends whose compiles are slow lower all examples at once."""
    ex = every_example()
    verify(ex.graph)
    assert {n.op for n in ex.graph.nodes()} == set(Op)
    assert len({n.attrs["name"] for n in ex.graph.inputs}) == len(ex.graph.inputs)
