"""networkx, DOT and JSON views share the printer's numbering and keep operand order."""

from __future__ import annotations

import json
import math

from pseudoformer.ir import DType, Graph, Node, Op, Span, TensorType
from pseudoformer.ir.view import to_dot, to_json, to_networkx

F32 = DType.float32


def square_minus_const() -> Graph:
    x = Node(Op.INPUT, attrs={"name": "x", "type": TensorType(F32, ("batch", 3))})
    sq = Node(Op.MUL, (x, x), span=Span("m.alg", 2, 1), scope="F")
    c = Node(Op.CONST, attrs={"value": -math.inf, "dtype": F32})
    return Graph([x], [("y", Node(Op.SUB, (c, sq)))], meta={"entry": "F", "dims": {"batch": "examples"}})


def test_networkx_keeps_both_edges_of_x_times_x() -> None:
    # Graph.nodes() order: x = %0, then sub's operands in order, c = %1 and x*x = %2, then sub = %3.
    g = to_networkx(square_minus_const())
    assert g.number_of_edges(0, 2) == 2
    assert sorted(d["index"] for _, _, d in g.in_edges(2, data=True)) == [0, 1]
    assert g.nodes[2]["op"] is Op.MUL and g.nodes[2]["type"] == TensorType(F32, ("batch", 3))
    assert g.nodes[0]["name"] == "x" and g.nodes[2]["span"] == Span("m.alg", 2, 1)
    # sub(c, sq): operand positions survive, so the order of a non-commutative op is recoverable.
    assert {(u, d["index"]) for u, _, d in g.in_edges(3, data=True)} == {(1, 0), (2, 1)}
    assert g.graph["inputs"] == [0] and g.graph["outputs"] == [("y", 3)]


def test_json_is_serialisable_and_numbered_like_the_printer() -> None:
    j = to_json(square_minus_const())
    text = json.dumps(j)
    back = json.loads(text)
    assert back["name"] == "F"
    assert [n["op"] for n in back["nodes"]] == ["input", "const", "mul", "sub"]
    assert [n["id"] for n in back["nodes"]] == [0, 1, 2, 3]
    assert back["nodes"][2]["inputs"] == [0, 0] and back["nodes"][3]["inputs"] == [1, 2]
    assert back["nodes"][0]["attrs"]["type"] == {"dtype": "float32", "shape": ["batch", 3]}
    assert back["nodes"][1]["attrs"] == {"dtype": "float32", "value": -math.inf}
    assert back["nodes"][2]["span"]["line"] == 2 and back["nodes"][2]["scope"] == "F"
    assert back["inputs"] == [{"name": "x", "id": 0}] and back["outputs"] == [{"name": "y", "id": 3}]
    assert back["meta"] == {"entry": "F", "dims": {"batch": "examples"}}


def test_dot_is_deterministic_and_labels_operand_positions() -> None:
    a, b = to_dot(square_minus_const()), to_dot(square_minus_const())
    assert a == b
    assert a.startswith('digraph "F" {')
    assert a.count('n0 -> n2 [label="0"];') == 1 and a.count('n0 -> n2 [label="1"];') == 1
    assert 'n1 -> n3 [label="0"];' in a and 'n2 -> n3 [label="1"];' in a and "n3 -> out0;" in a
    assert a.rstrip().endswith("}")
