"""The verifier accepts well-formed graphs and reports every broken invariant of a bad one at once."""

from __future__ import annotations

import pytest

from pseudoformer.ir import DType, Graph, Node, Op, TensorType
from pseudoformer.ir.verify import IRVerifyError, verify

F32, I64 = DType.float32, DType.int64


def inp(name: str, *shape: int | str, dtype: DType = F32) -> Node:
    return Node(Op.INPUT, attrs={"name": name, "type": TensorType(dtype, tuple(shape))})


def param(name: str, *shape: int) -> Node:
    return Node(Op.PARAM, attrs={"name": name, "type": TensorType(F32, tuple(shape))})


def problems(g: Graph) -> list[str]:
    with pytest.raises(IRVerifyError) as err:
        verify(g)
    return err.value.problems


def good() -> tuple[Graph, dict[str, Node]]:
    x = inp("x", "batch", 4, "seq")
    w = param("W", 3, 4)
    h = Node(Op.MATMUL, (w, x))
    t = Node(Op.TRANSPOSE, (h,), {"perm": (0, 2, 1)})
    r = Node(Op.RESHAPE, (t,), {"shape": ("batch", "seq", 3, 1)})
    n = Node(Op.DIM, (x,), {"axis": 2})
    m = Node(Op.INDEX_MASK, (n, n), {"rel": "<", "dims": ("seq", "seq")})
    g = Graph([x], [("y", r), ("m", m), ("y2", Node(Op.MUL, (h, h)))])
    return g, {"x": x, "W": w, "h": h, "t": t, "r": r}


def test_a_well_formed_graph_passes() -> None:
    g, _ = good()
    assert verify(g) is None


def test_tampered_type_is_caught() -> None:
    g, n = good()
    n["h"].type = TensorType(F32, ("batch", 4, "seq"))
    found = problems(g)
    assert any("stored type float32[batch, 4, seq] differs from the inferred type float32[batch, 3, seq]" in p
               for p in found)
    # Its users now disagree with their stored types too, and are reported in the same exception.
    assert any(p.startswith("%3 (transpose") for p in found)
    assert any(p.startswith("%7 (mul") for p in found)
    assert not any(p.startswith("%4 (reshape") for p in found)  # checked against stored types only


def test_stray_input_is_caught() -> None:
    x, stray = inp("x", 2), inp("z", 2)
    g = Graph([x], [("y", Node(Op.ADD, (x, stray)))])
    (msg,) = problems(g)
    assert "input 'z'" in msg and "not among the graph's inputs" in msg


def test_duplicate_names_and_conflicting_params_all_reported() -> None:
    x1, x2 = inp("x", 3), inp("x", 3)
    a = Node(Op.ADD, (x1, param("b", 3)))
    b = Node(Op.ADD, (x2, param("b", 1)))
    found = problems(Graph([x1, x2], [("y", a), ("y", b)]))
    text = "\n".join(found)
    assert "input name 'x' is declared twice" in text
    assert "output name 'y' is declared twice" in text
    assert "param 'b' has type float32[1] here and float32[3] elsewhere" in text


def test_missing_required_attribute() -> None:
    g, n = good()
    del n["t"].attrs["perm"]
    (msg,) = problems(g)
    assert "transpose" in msg and "missing attribute(s) perm" in msg


def test_cycle_is_caught() -> None:
    x = inp("x", 2)
    a = Node(Op.EXP, (x,))
    b = Node(Op.NEG, (a,))
    a.src = (b,)  # only mutation can close a loop; passes that rewrite src could do it
    found = problems(Graph([x], [("y", b)]))
    assert any(p.startswith("cycle through") for p in found)


def test_reshape_to_a_symbol_the_operand_lacks() -> None:
    x = inp("x", "batch", 6)
    r = Node(Op.RESHAPE, (x,), {"shape": ("batch", "heads", 3)})
    (msg,) = problems(Graph([x], [("y", r)]))
    assert "'heads' is not a dim of the operand" in msg


def test_reshape_changing_the_element_count() -> None:
    x = inp("x", 2, 6)
    (msg,) = problems(Graph([x], [("y", Node(Op.RESHAPE, (x,), {"shape": (5, 2)}))]))
    assert "changes the element count" in msg


def test_bad_gelu_approximation_and_wrong_arity() -> None:
    x = inp("x", 2)
    gl = Node(Op.GELU, (x,), {"approximate": "erf"})
    e = Node(Op.EXP, (x,))
    e.src = (x, x)
    found = problems(Graph([x], [("a", gl), ("b", e)]))
    assert any("gelu approximate='erf'" in p for p in found)
    assert any("takes 1 operand(s), has 2" in p for p in found)


def test_symbolic_param_and_input_param_name_clash() -> None:
    x = inp("W", "n")
    p = Node(Op.PARAM, attrs={"name": "W", "type": TensorType(F32, ("n",))})
    found = problems(Graph([x], [("y", Node(Op.ADD, (x, p)))]))
    text = "\n".join(found)
    assert "symbolic dims" in text and "both an input and a param" in text


def test_graph_input_that_is_not_an_input_node() -> None:
    p = param("W", 2)
    found = problems(Graph([p], [("y", p)]))
    assert any("not an input node" in p for p in found)
