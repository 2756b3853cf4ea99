"""The printer's text is a golden-test format: it must be exact and independent of object identity."""

from __future__ import annotations

import math

from pseudoformer.ir import DType, Graph, Node, Op, Span, TensorType
from pseudoformer.ir.printer import format_graph, format_value

F32, I64 = DType.float32, DType.int64


def tiny_lm() -> Graph:
    """Embedding lookup, a causal mask, a scaled square and a reduction: one of most kinds of node."""
    x = Node(Op.INPUT, attrs={"name": "x", "type": TensorType(I64, ("batch", "seq"))})
    w = Node(Op.PARAM, attrs={"type": TensorType(F32, (4, 10)), "name": "W_e"},
             span=Span("models/tiny.alg", 3, 5))
    e = Node(Op.GATHER, (w, x), {"axis": 1}, span=Span("models/tiny.alg", 14, 3, 14, 20), scope="Tiny")
    sq = Node(Op.MUL, (e, e), span=Span("models/tiny.alg", 15, 3), scope="Tiny/layers.0")
    half = Node(Op.CONST, attrs={"value": 0.5, "dtype": F32})
    h = Node(Op.MUL, (sq, half))
    r = Node(Op.REDUCE_SUM, (h,), {"keepdims": True, "axes": (0,)})
    n = Node(Op.DIM, (x,), {"axis": -1})
    m = Node(Op.INDEX_MASK, (n, n), {"rel": "<=", "dims": ("seq", "seq")})
    neg = Node(Op.CONST, attrs={"value": -math.inf, "dtype": F32})
    return Graph([x], [("P", r), ("mask", m), ("fill", neg)], meta={"entry": "Tiny", "d_e": 4})


GOLDEN = """\
graph Tiny(x: int64[batch, seq]) -> (P: float32[1, batch, seq], mask: bool[seq, seq], fill: float32[])
  %1 = param "W_e" : float32[4, 10]  # models/tiny.alg:3
  %2 = gather %1, %x {axis=1} : float32[4, batch, seq]  # models/tiny.alg:14  Tiny
  %3 = mul %2, %2 : float32[4, batch, seq]  # models/tiny.alg:15  Tiny/layers.0
  %4 = const 0.5 : float32[]
  %5 = mul %3, %4 : float32[4, batch, seq]
  %6 = reduce_sum %5 {axes=[0], keepdims=true} : float32[1, batch, seq]
  %7 = dim %x {axis=-1} : int64[]
  %8 = index_mask %7, %7 {dims=["seq", "seq"], rel="<="} : bool[seq, seq]
  %9 = const -inf : float32[]
  return P = %6, mask = %8, fill = %9
"""


def test_golden() -> None:
    assert format_graph(tiny_lm()) == GOLDEN


def test_without_locations_drops_only_the_comments() -> None:
    text = format_graph(tiny_lm(), with_locations=False)
    assert "#" not in text
    assert text == "\n".join(line.split("  #")[0] for line in GOLDEN.splitlines()) + "\n"


def test_deterministic_across_separately_built_graphs() -> None:
    # Fresh objects get fresh ids; nothing in the text may depend on them or on dict/set order.
    texts = {format_graph(tiny_lm()) for _ in range(5)}
    assert len(texts) == 1


def test_default_name_and_an_input_returned_directly() -> None:
    x = Node(Op.INPUT, attrs={"name": "x", "type": TensorType(F32, (2,))})
    g = Graph([x], [("y", Node(Op.NEG, (x,))), ("same", x)])
    assert format_graph(g) == (
        "graph main(x: float32[2]) -> (y: float32[2], same: float32[2])\n"
        "  %1 = neg %x : float32[2]\n"
        "  return y = %1, same = %x\n"
    )


def test_attribute_values() -> None:
    assert format_value(1e-05) == "1e-05"
    assert format_value(0.1) == "0.1"
    assert format_value(float("nan")) == "nan"
    assert format_value(("batch", 3)) == '["batch", 3]'
    assert format_value(False) == "false"
    assert format_value(DType.bool) == "bool"
    assert format_value({"b": 1, "a": 'say "hi"'}) == '{a="say \\"hi\\"", b=1}'
