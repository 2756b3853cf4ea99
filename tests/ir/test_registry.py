"""The op registry: every op is defined once, with everything the stages ask of it."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer.ir import DType, Graph, Node, Op, TensorType
from pseudoformer.ir.interpreter import run
from pseudoformer.ir.ops import OPS, REQUIRED, Attr, IRTypeError, OpDef, attr_problem, op_def
from pseudoformer.ir.ops.registry import ATTR_KINDS, register
from pseudoformer.ir.verify import verify
from pseudoformer.passes.layout import RULES

F32 = DType.float32
LAYOUTS = set(RULES)
PRECISIONS = {"anchor", "follower", "half"}


def test_every_op_is_defined_once_with_its_rules() -> None:
    assert set(OPS) == set(Op)
    for op, d in OPS.items():
        assert d.op is op
        assert d.layout in LAYOUTS, f"{op.value}: no layout rule for kind {d.layout!r}"
        assert d.precision in PRECISIONS
        assert all(a.kind in ATTR_KINDS for a in d.attrs), op
        assert len({a.name for a in d.attrs}) == len(d.attrs), op
        assert d.vjp is None  # the slot the training algorithms will fill
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


@pytest.mark.parametrize("op", [op for op, d in OPS.items() if d.decompose is not None])
def test_each_decomposition_computes_what_its_op_computes(op: Op) -> None:
    """The formula a backend lowers instead of the op (passes/decompose.py) agrees with the op's impl."""
    from pseudoformer.passes.decompose import decompose

    graph, feed = _one_op_graph(op)
    lowered, changed = decompose(graph, accepts=lambda n: n.op is not op)
    verify(lowered)
    assert changed and op not in {n.op for n in lowered.nodes()}
    want, got = run(graph, feed, {}), run(lowered, feed, {})
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6, err_msg=name)


def _one_op_graph(op: Op) -> tuple[Graph, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)

    def inp(name: str, *shape: int | str, dtype: DType = F32) -> Node:
        return Node(Op.INPUT, (), {"name": name, "type": TensorType(dtype, tuple(shape))})

    x = inp("x", 2, 5, 6)
    feed = {"x": rng.standard_normal((2, 5, 6)).astype(np.float32)}
    if op is Op.GELU:
        outs = [Node(op, (x,), {"approximate": a}) for a in ("none", "tanh")]
    elif op is Op.MOD:  # negative dividends and divisors: the remainder takes the divisor's sign
        outs = [Node(op, (x, Node(Op.CONST, (), {"value": c, "dtype": F32}))) for c in (0.75, -0.5, 3.0)]
    elif op in (Op.LAYER_NORM, Op.RMS_NORM):
        vectors = [inp("g", 5)] + ([inp("b", 5)] if op is Op.LAYER_NORM else [])
        feed |= {v.attrs["name"]: rng.standard_normal(5).astype(np.float32) for v in vectors}
        y = Node(op, (x, *vectors), {"axis": 1, "eps": 1e-5})  # over a middle axis
        return Graph([x, *vectors], [("y", y)]), feed
    elif op is Op.ATTENTION:
        q, k = inp("q", 2, 4, "s", 3), inp("k", 2, 2, "s", 3)
        feed = {"q": rng.standard_normal((2, 4, 5, 3)).astype(np.float32),
                "k": rng.standard_normal((2, 2, 5, 3)).astype(np.float32)}
        outs = [Node(op, (q, k, k), {"scale": 0.5, "causal": True})]  # grouped, causal
        return Graph([q, k], [("y", outs[0])]), feed
    elif op is Op.CACHED_ATTENTION:
        q, k, pk = inp("q", 2, 2, "s", 3), inp("k", 2, 2, "s", 3), inp("pk", 2, 2, "p", 3)
        feed = {"q": rng.standard_normal((2, 2, 4, 3)).astype(np.float32),
                "k": rng.standard_normal((2, 2, 4, 3)).astype(np.float32),
                "pk": rng.standard_normal((2, 2, 3, 3)).astype(np.float32)}
        r = Node(op, (q, k, k, pk, pk), {"scale": 0.5, "causal": True})
        outs = [Node(Op.GET, (r,), {"index": i}) for i in range(3)]
        return Graph([q, k, pk], [(f"y{i}", o) for i, o in enumerate(outs)]), feed
    else:
        raise AssertionError(f"no test graph for {op.value}")
    return Graph([x], [(f"y{i}", o) for i, o in enumerate(outs)]), feed
