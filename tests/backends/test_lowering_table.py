"""Both backends keep their lowerings in one kind of table (backends/lowering_table.py), which refuses an op
lowered twice instead of letting the module imported last win."""

from __future__ import annotations

import pytest

from pseudoformer.backends.lowering_table import LoweringTable
from pseudoformer.backends.onnx.lowerings import LOWERINGS as ONNX_LOWERINGS
from pseudoformer.ir import DType, Node, Op, TensorType


def _x(rank: int = 2) -> Node:
    return Node(Op.INPUT, (), {"name": "x", "type": TensorType(DType.float32, (2,) * rank)})


def test_a_second_lowering_of_an_op_is_refused_and_the_first_kept() -> None:
    table: LoweringTable = LoweringTable("Test")

    @table.lowers(Op.NEG, Op.EXP)
    def first(lw: object, n: Node) -> str:
        return "first"

    with pytest.raises(ValueError, match=r"two Test lowerings of exp: .*first and .*second"):
        @table.lowers(Op.SIN, Op.EXP)
        def second(lw: object, n: Node) -> str:
            return "second"

    assert set(table) == {Op.NEG, Op.EXP}  # nothing of the refused registration stays, not even sin
    assert table[Op.EXP].fn is first


def test_when_takes_the_node_and_the_backends_context() -> None:
    table: LoweringTable = LoweringTable("Test")
    table.lowers(Op.GELU, when=lambda n, opset: opset >= 20)(lambda lw, n: "gelu")
    gelu = Node(Op.GELU, (_x(),))
    assert table.accepts(gelu, 20) and not table.accepts(gelu, 19)
    assert not table.accepts(Node(Op.NEG, (_x(),)), 20)  # no lowering: its decomposition, or an error


def test_the_onnx_table_refuses_a_duplicate() -> None:
    with pytest.raises(ValueError, match="two ONNX lowerings of add"):
        ONNX_LOWERINGS.lowers(Op.ADD)(lambda e, n: "again")
    assert ONNX_LOWERINGS[Op.ADD].fn.__name__ != "<lambda>"


def test_the_tvm_table_refuses_a_duplicate() -> None:
    pytest.importorskip("tvm.relax", reason="apache-tvm is not installed: pip install pseudoformer[tvm]")
    from pseudoformer.backends.tvm.lowerings import LOWERINGS as TVM_LOWERINGS

    with pytest.raises(ValueError, match="two TVM lowerings of add"):
        TVM_LOWERINGS.lowers(Op.ADD)(lambda lw, n: "again")
    assert TVM_LOWERINGS[Op.ADD].fn.__name__ != "<lambda>"
