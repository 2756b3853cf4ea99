"""compile --functions: each algorithm call an ONNX local function, the same model as the flat one.

The oracle is the flat model of the same graph: onnxruntime inlines local functions when it loads a
model, so the two must give the same bits. The structure is checked against the IR's scopes: every
call is a function call at its place in the nesting, and each call's own nodes are those the flat
model has under that scope.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator
from onnx_cases import I64, inp, op

from pseudoformer.backends.onnx import DEFAULT_OPSET, OnnxRunner, save_model
from pseudoformer.backends.onnx.calls import plan_calls
from pseudoformer.backends.onnx.compile import lower_model, prepare, to_onnx
from pseudoformer.backends.onnx.functions import DOMAIN
from pseudoformer.backends.options import CompileOptions
from pseudoformer.cli import main
from pseudoformer.deploy import lower
from pseudoformer.ir.graph import Graph
from pseudoformer.ir.ops import Op
from pseudoformer.model import Model, load

MODELS = Path(__file__).resolve().parents[2] / "models"
TINY = dict(H=2, d_e=8, d_mlp=16, d_attn=4, d_mid=4, ell_max=40, N_V=11)
SIZES = {"gpt2": dict(L=2), "bert": dict(L=2, d_f=8), "bart": dict(L_enc=2, L_dec=2)}


def _load(name: str, **extra: int) -> Model:
    hyper = TINY | SIZES[name] | extra
    return load(MODELS / f"{name}.alg", defines=[f"{k}={v}" for k, v in hyper.items()])


def _feeds(m: Model) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    names = [str(i.attrs["name"]) for i in m.graph.inputs]
    return [{n: rng.integers(0, TINY["N_V"], size, dtype=np.int64) for n in names} for size in ((2, 9), (1, 3))]


def _calls(model: onnx.ModelProto) -> Iterator[tuple[str, onnx.FunctionProto]]:
    """Every call, as (its full key, "GPT2/layers.0/layer_norm#2", and the function it calls), callers first."""
    functions = {(f.domain, f.name): f for f in model.functions}
    todo = [("", n) for n in model.graph.node if n.domain == DOMAIN]
    while todo:
        caller, node = todo.pop(0)
        key = f"{caller}/{node.name}" if caller else node.name
        f = functions[node.domain, node.op_type]
        yield key, f
        todo += [(key, n) for n in f.node if n.domain == DOMAIN]


# An emitted node's name: "<scope>/<ir op>_<n>", with "/<OnnxOp>" for a helper node.
_NAME = re.compile(r"^(?:(?P<scope>.+)/)?[a-z][a-z0-9_]*_\d+(?:/[A-Z]\w*)?$")
_PER_CALL = {"Constant", "Shape"}  # made again in each call that uses them


def _ops_by_scope(model: onnx.ModelProto, entry: str) -> dict[str, Counter]:
    """The ONNX ops each scope's calls own (the entry's and the graph's own as ""), Constants and Shapes aside."""
    out: dict[str, Counter] = {}
    if model.functions:
        roots = [n for n in model.graph.node if n.domain != DOMAIN]
        for key, f in _calls(model):
            scope = "/".join(part.split("#")[0] for part in key.split("/"))
            out.setdefault(scope, Counter()).update(n.op_type for n in f.node
                                                    if n.domain != DOMAIN and n.op_type not in _PER_CALL)
    else:
        roots = []
        for n in model.graph.node:
            m = _NAME.match(n.name)
            scope = m.group("scope") or "" if m else ""
            if scope in ("", entry) or scope.startswith("outputs/"):
                roots.append(n)
            elif n.op_type not in _PER_CALL:
                out.setdefault(scope, Counter())[n.op_type] += 1
    out[""] = Counter(n.op_type for n in roots if n.op_type not in _PER_CALL)
    return out


def _ort(model: onnx.ModelProto, level: ort.GraphOptimizationLevel) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("level", [0, 2])
@pytest.mark.parametrize("name", ["gpt2", "bert", "bart"])
def test_functions_give_the_flat_models_bits(name: str, level: int, dtype: str) -> None:
    """Bit for bit with every ORT rewrite, except in fp16 at -O2: ORT's CPU provider has no fp16
    Gelu kernel and expands Gelu's ONNX definition, whose constant √(2/π) its optimised flat graph
    computes with an fp16 Sqrt and the inlined functions' graph in fp32 then cast, so a few outputs
    differ in the last bit (3.8e-6 of 0.15 in GPT-2); there the two agree to a tolerance."""
    m = _load(name)
    flat = lower(m, dtype=dtype, opt_level=level)
    folded = lower(m, dtype=dtype, opt_level=level, functions=True)
    onnx.checker.check_model(folded, full_check=True)
    assert not flat.functions and folded.functions
    assert {(o.domain, o.version) for o in folded.opset_import} == {("", DEFAULT_OPSET), (DOMAIN, 1)}
    assert all({(o.domain, o.version) for o in f.opset_import} == {("", DEFAULT_OPSET), (DOMAIN, 1)} for f in folded.functions)
    has_attention = any(n.op_type == "Attention" and n.domain == "" for f in folded.functions for n in f.node)
    assert has_attention == (level == 2)
    exact = dtype == "float32" or level == 0
    rewrites = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    a, b = _ort(flat, rewrites), _ort(folded, rewrites)
    close_a, close_b = OnnxRunner(flat), OnnxRunner(folded)  # ORT's defaults: every rewrite
    for feed in _feeds(m):
        for want, got in zip(a.run(None, feed), b.run(None, feed), strict=True):
            assert got.dtype == want.dtype
            assert np.array_equal(got, want) if exact else np.allclose(got, want, rtol=1e-3, atol=1e-5)
        tol = 2e-3 if dtype == "float16" else 1e-5
        for name_, want in close_a.run(feed).items():
            np.testing.assert_allclose(close_b.run(feed)[name_], want, rtol=tol, atol=tol)
    # The same ops under the same scopes: each call holds what the flat model has under its scope.
    entry = str(m.graph.meta["entry"])
    assert _ops_by_scope(folded, entry) == _ops_by_scope(flat, entry)


def test_without_the_attention_op_the_bits_are_the_same_with_every_rewrite() -> None:
    # Opset 22 has no Attention op: -O2 lowers attention by its parts, and ORT runs one graph.
    m = _load("gpt2")
    flat, folded = (lower(m, opset=22, functions=f) for f in (False, True))
    for feed in _feeds(m):
        assert np.array_equal(OnnxRunner(folded).run(feed)["Y"], OnnxRunner(flat).run(feed)["Y"])


@pytest.mark.parametrize("level", [0, 2])
def test_gpt2_calls_nest_as_the_algorithms_call_each_other(level: int) -> None:
    folded = lower(_load("gpt2"), opt_level=level, functions=True)
    keys = [k for k, _ in _calls(folded)]
    per_layer = ["", "/layer_norm", "/MHAttention", "/MHAttention/heads.0/Attention", "/MHAttention/heads.1/Attention",
                 "/layer_norm#2", "/GELU_tanh"]
    want = [f"GPT2/layers.{i}{k}" for i in range(2) for k in per_layer] + ["GPT2/layer_norm"]
    assert sorted(keys) == sorted(want)
    # Identical calls share one definition: both layers, all three layer norms, both heads.
    assert sorted(f.name for f in folded.functions) == ["Attention", "GELU_tanh", "MHAttention", "layer_norm", "layers"]
    assert Counter(f.name for _, f in _calls(folded)) == {"layers": 2, "layer_norm": 5, "MHAttention": 2,
                                                          "Attention": 4, "GELU_tanh": 2}


def test_each_layer_passes_its_own_weights_to_the_one_definition() -> None:
    folded = lower(_load("gpt2", L=3), functions=True)
    layers = [n for n in folded.graph.node if n.op_type == "layers"]
    assert [n.name for n in layers] == ["GPT2/layers.0", "GPT2/layers.1", "GPT2/layers.2"]
    assert len({tuple(n.input) for n in layers}) == 3
    for i, n in enumerate(layers):
        assert f"layers.{i}.W_mlp1" in n.input and f"layers.{i}.W.heads.1.W_q" in n.input
    (layer,) = [f for f in folded.functions if f.name == "layers"]
    assert "W_mlp1" in layer.input and "heads.1.W_q" in layer.input  # named after the weight they take
    assert len(folded.graph.initializer) == len(lower(_load("gpt2", L=3)).graph.initializer)
    assert not any(n.op_type == "Constant" and n.output[0] in folded.graph.initializer for n in layer.node)


def test_bart_encoder_and_decoder_layers_are_separate_calls() -> None:
    # Both loops' iterations have the scope layers.k, and the last encoder layer feeds the last decoder layer.
    folded = lower(_load("bart"), functions=True)
    calls = Counter(f.name for _, f in _calls(folded))
    assert calls["layers"] + calls["layers_v2"] == 4 and calls["layers"] == calls["layers_v2"] == 2
    assert sum(v for k, v in calls.items() if k.startswith("MHAttention")) == 6  # 2 + 2 × 2
    assert sum(v for k, v in calls.items() if k.startswith("layer_norm")) == 2 + 2 * 2 + 2 * 3


def test_the_padding_mask_is_passed_down_to_the_attention_calls() -> None:
    m = _load("bart")
    flat, folded = (lower(m, padding_mask=True, functions=f) for f in (False, True))
    assert [i.name for i in folded.graph.input] == ["z", "x", "z_attention_mask", "x_attention_mask"]
    # Each layer call takes a mask computed from the attention_mask inputs (Equal, Not) outside it.
    producer = {o: n for n in folded.graph.node for o in n.output}

    def reads_a_mask(value: str, depth: int = 3) -> bool:
        n = producer.get(value)
        return n is not None and depth > 0 and any(
            i in ("z_attention_mask", "x_attention_mask") or reads_a_mask(i, depth - 1) for i in n.input)

    layers = [n for n in folded.graph.node if n.op_type.startswith("layers")]
    assert len(layers) == 4 and all(any(reads_a_mask(i) for i in n.input) for n in layers)
    feed = {"z": np.array([[1, 2, 3, 4], [5, 6, 0, 0]]), "x": np.array([[7, 8, 9], [1, 2, 0]]),
            "z_attention_mask": np.array([[1, 1, 1, 1], [1, 1, 0, 0]]), "x_attention_mask": np.array([[1, 1, 1], [1, 1, 0]])}
    np.testing.assert_allclose(OnnxRunner(folded).run(feed)["Y"], OnnxRunner(flat).run(feed)["Y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("name", "level"), [("gpt2", 2), ("gpt2", 0), ("bart", 2)])
def test_onnx_reference_evaluator_runs_the_functions(name: str, level: int) -> None:
    m = _load(name)
    folded = lower(m, opt_level=level, functions=True)
    runner = ReferenceEvaluator(folded)
    for feed in _feeds(m):
        (got,) = runner.run(None, feed)
        np.testing.assert_allclose(got, m.run(**feed)["Y"], atol=1e-5)


def test_external_data_keeps_the_functions(tmp_path: Path) -> None:
    m = _load("gpt2")
    lowered = lower(m, whole=False, functions=True)
    for path, model in ((tmp_path / "a.onnx", lowered), (tmp_path / "b.onnx", lowered.to_proto())):
        save_model(model, path, external_threshold=4096)
        assert (tmp_path / f"{path.name}.data").is_file()
        saved = onnx.load(str(path), load_external_data=False)
        assert [f.name for f in saved.functions] == [f.name for f in lowered.skeleton.functions]
        want = OnnxRunner(lower(m)).run(_feeds(m)[0])["Y"]
        assert np.array_equal(OnnxRunner(path).run(_feeds(m)[0])["Y"], want)


def test_a_call_tangled_with_another_is_dissolved_into_its_caller() -> None:
    # g's size of f's value (which E reads) is g's by its scope, so f → g → f: one of the two cannot be
    # a node of E's graph. g, the smaller, goes.
    x = inp("x", I64, "batch", "seq")
    a = op(Op.MUL, x, x, scope="E/f")
    b = op(Op.ADD, x, x, scope="E/g")
    c = op(Op.ADD, *2 * [op(Op.MUL, a, b, scope="E/f")], scope="E/f")
    graph = Graph([x], [("y", op(Op.MUL, c, op(Op.DIM, a, axis=1, scope="E/g"), scope="E"))], {"entry": "E"})
    plan = plan_calls(prepare(graph, {}, CompileOptions(opset=DEFAULT_OPSET))[0])
    assert [c.key for c in plan.calls()] == ["f"]
    feed = {"x": np.arange(6, dtype=np.int64).reshape(2, 3)}
    folded = to_onnx(graph, {}, functions=True)
    assert [f.name for f in folded.functions] == ["f"]
    assert np.array_equal(OnnxRunner(folded).run(feed)["y"], OnnxRunner(to_onnx(graph, {})).run(feed)["y"])


def test_without_functions_the_model_is_unchanged() -> None:
    m = _load("gpt2")
    graph = m.graph
    plain = lower_model(graph, m.weights).skeleton
    assert plain == lower_model(graph, m.weights, functions=False).skeleton
    assert not plain.functions and [o.domain for o in plain.opset_import] == [""]


def test_cli_compile_functions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "g.onnx"
    defines = [x for k, v in (TINY | SIZES["gpt2"]).items() for x in ("-D", f"{k}={v}")]
    assert main(["compile", str(MODELS / "gpt2.alg"), *defines, "--functions", "-o", str(out)]) == 0
    assert {f.name for f in onnx.load(str(out)).functions} == {"Attention", "GELU_tanh", "MHAttention", "layer_norm",
                                                                "layers"}
    assert main(["compile", str(MODELS / "gpt2.alg"), *defines, "--functions", "--backend", "tvm",
                 "-o", str(tmp_path / "g.so")]) == 1
    assert "--functions is for the onnx backend" in capsys.readouterr().err
    assert not (tmp_path / "g.so").exists()


def test_quantized_weights_inside_functions() -> None:
    # MatMulNBits inside the layer functions: both the model and each function import com.microsoft,
    # and the folded model computes what the flat quantized one does.
    from pseudoformer.passes.quantize import QuantizeOptions

    m = _load("gpt2")
    q = QuantizeOptions(bits=4, block_size=32, symmetric=True, accuracy_level=0)
    flat, folded = (lower(m, quantize=q, functions=f) for f in (False, True))
    onnx.checker.check_model(folded, full_check=True)
    assert any(n.op_type == "MatMulNBits" for f in folded.functions for n in f.node)
    assert all("com.microsoft" in {o.domain for o in f.opset_import}
               for f in folded.functions if any(n.domain == "com.microsoft" for n in f.node))
    for feed in _feeds(m):
        np.testing.assert_allclose(OnnxRunner(folded).run(feed)["Y"], OnnxRunner(flat).run(feed)["Y"],
                                   rtol=1e-5, atol=1e-5)
