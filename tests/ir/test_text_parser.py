"""ir.parse reads what the printer writes: the round trip is exact, and a text that is not a graph says where."""

from __future__ import annotations

import numpy as np
import pytest

from pseudoformer import ir
from pseudoformer.ir import IRParseError
from pseudoformer.ir.interpreter import run
from pseudoformer.ir.printer import format_graph
from pseudoformer.ir.verify import verify
from pseudoformer.model import load
from pseudoformer.optimize import optimize, trace

SMALL = ["H=2", "d_e=8", "d_mlp=16", "d_attn=4", "d_mid=4", "ell_max=8", "N_V=11", "eps=1e-5", "L=2"]
MODELS = [("gpt2", SMALL), ("bert", [*SMALL, "d_f=8"]), ("bart", ["L_enc=1", "L_dec=1", "d_e=16", "H=2",
                                                                   "d_mlp=32", "N_V=37", "ell_max=16"])]


def _round_trip(g: ir.Graph) -> None:
    for locations in (True, False):
        text = format_graph(g, with_locations=locations)
        back = ir.parse(text)
        verify(back)
        assert format_graph(back, with_locations=locations) == text


@pytest.mark.parametrize(("name", "defines"), MODELS, ids=[m for m, _ in MODELS])
def test_every_graph_of_the_optimisation_round_trips(name: str, defines: list[str]) -> None:
    model = load(name, config="/dev/null" if name != "bart" else None, defines=defines)
    _round_trip(model.graph)
    for _, g in trace(model.graph, 2):
        _round_trip(g)


def test_backend_graphs_round_trip_tuples_casts_and_folded_weights() -> None:
    from pseudoformer.backends.onnx.compile import prepare
    from pseudoformer.backends.options import CompileOptions
    from pseudoformer.generation.generator import Generator

    model = load("gpt2", config="/dev/null", defines=SMALL)
    gen = Generator(model, backend="numpy")
    step, _ = prepare(gen.decoder.step, gen.weights, CompileOptions(opset=26, dtype="float16"))  # cached_attention with its tuple type, get, casts
    assert {"cached_attention", "get", "cast"} <= {n.op.value for n in step.nodes()}
    _round_trip(step)
    _round_trip(gen.decoder.prefill)


def test_a_parsed_graph_computes_what_the_printed_one_did() -> None:
    model = load("gpt2", config="/dev/null", defines=SMALL)
    g = optimize(model.graph, 2)
    x = np.random.default_rng(0).integers(0, 11, (2, 5))
    want = run(g, {"x": x}, model.weights)["Y"]
    np.testing.assert_array_equal(run(ir.parse(format_graph(g)), {"x": x}, model.weights)["Y"], want)


def test_hand_written_text_with_any_numbering() -> None:
    g = ir.parse('''
        graph f(x: float32[batch, 3]) -> (y: float32[batch, 3])
          %7 = param "w" : float32[3]
          %2 = mul %x, %7 : float32[batch, 3]
          %40 = const 0.5 : float32[]
          %3 = add %2, %40 : float32[batch, 3]  # my.alg:4  f/inner
          return y = %3
    ''')
    (_, y), = g.outputs
    assert y.span is not None and (y.span.file, y.span.line) == ("my.alg", 4) and y.scope == "f/inner"
    out = run(g, {"x": np.ones((2, 3), np.float32)}, {"w": np.array([1, 2, 3], np.float32)})["y"]
    np.testing.assert_array_equal(out, [[1.5, 2.5, 3.5]] * 2)
    assert format_graph(g).splitlines()[1] == '  %1 = param "w" : float32[3]'  # printed with its own numbers


@pytest.mark.parametrize(("text", "line", "message"), [
    ("", 0, "the text is empty"),
    ("graph f(x: float32[2]) -> (y: float32[2])\n  %1 = frobnicate %x : float32[2]\n  return y = %1", 2,
     "unknown op 'frobnicate'"),
    ("graph f(x: float32[2]) -> (y: float32[2])\n  %1 = neg %z : float32[2]\n  return y = %1", 2,
     "%z is not defined above"),
    ("graph f(x: float32[2]) -> (y: float32[2])\n  %1 = neg %x : float32[3]\n  return y = %1", 2,
     "neg has type float32[2], not the float32[3] written"),
    ("graph f(x: float32[2]) -> (y: float32[2])\n  %1 = neg %x : float128[2]\n  return y = %1", 2,
     "'float128' is not a dtype"),
    ("graph f(x: float32[2]) -> (y: float32[2])\n  %1 = matmul %x, %x : float32[2]\n  return y = %1", 2,
     "matmul is ill-typed: matmul needs rank >= 2 operands"),
    ("graph f(x: float32[2]) -> (y: float32[2])\n  return y = %q", 2, "%q is not defined"),
])
def test_text_that_is_not_a_graph_says_where(text: str, line: int, message: str) -> None:
    with pytest.raises(IRParseError) as e:
        ir.parse(text)
    assert e.value.line == line and message in str(e.value)
