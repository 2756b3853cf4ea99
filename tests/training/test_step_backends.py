"""The one training step graph on every backend: the numpy interpreter is the reference; onnxruntime
(parameters and state kept in bound OrtValues between steps), ONNX's reference evaluator (standard ops
only) and TVM agree with it."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

from pseudoformer.backends.onnx import to_onnx
from pseudoformer.backends.onnx.in_place import in_place_problems
from pseudoformer.model import load
from pseudoformer.passes.training_step import LR, NEW, Optimizer
from pseudoformer.training.compile import compile_step
from pseudoformer.training.runtimes import OrtSplitStep, OrtStep, make_runtime

HERE = Path(__file__).parent
OPTIMIZERS = {"sgd": Optimizer("sgd"), "adamw": Optimizer("adamw", clip=0.5)}
X = np.array([[1, 2, 3, 4, 5, 1], [3, 3, 3, 7, 8, 1]], np.int64)


def _step(opt: str):  # type: ignore[no-untyped-def]
    model = load(HERE / "gpt2_loss.alg", defines=["L=1", "H=2", "d_e=8", "d_mlp=16", "d_attn=4", "d_mid=4",
                                                  "N_V=11", "ell_max=16", "eps=1e-5"], seed=2)
    # b_k: an exactly zero gradient, which AdamW turns into steps of rounding noise
    train = [k for k in model.weights if ".b_k" not in k]
    return compile_step(model.graph, model.weights, train=train, optimizer=OPTIMIZERS[opt])


def _reference(step, steps: int = 3):  # type: ignore[no-untyped-def]
    rt = make_runtime("interpreter", step.graph, step.frozen, step.state)
    return [rt.step({"x": X}, 0.05) for _ in range(steps)], rt.values()


@pytest.mark.parametrize("split", [True, False], ids=["split", "one-graph"])
@pytest.mark.parametrize("opt", OPTIMIZERS)
def test_onnxruntime_keeps_buffers_between_steps_and_agrees(opt: str, split: bool) -> None:
    step = _step(opt)
    losses, want = _reference(step)
    rt = make_runtime("onnxruntime", step.graph, step.frozen, step.state, split=step.split if split else None)
    assert isinstance(rt, OrtSplitStep if split else OrtStep)
    got = [rt.step({"x": X}, 0.05) for _ in range(3)]
    np.testing.assert_allclose(got, losses, rtol=1e-5)
    values = rt.values()
    assert all(np.allclose(values[k], want[k], rtol=1e-4, atol=1e-6) for k in want)
    # the carried values live in OrtValues (one graph: two sets that swap), never rebuilt from numpy
    assert all(type(v).__name__ == "OrtValue" for v in rt.buffers[0].values())


@pytest.mark.parametrize("chunk", [None, 5], ids=["whole", "pieces"])
@pytest.mark.parametrize("opt", OPTIMIZERS)
def test_the_split_step_updates_in_place_and_equals_the_one_graph_step(opt: str, chunk: int | None) -> None:
    """The gradient graph then the update graph, θ and the state written over their own buffers
    (passes/split_step.py), give the one graph's losses and values bit for bit over five steps; so does
    the update cut into pieces of 5 elements (passes/update_chunks.py), the last piece of a tensor shorter."""
    step = _step(opt)
    assert step.split is not None
    split = make_runtime("onnxruntime", step.graph, step.frozen, step.state, split=step.split,
                         **({"update_chunk": chunk} if chunk else {}))
    one = make_runtime("onnxruntime", step.graph, step.frozen, step.state)
    assert isinstance(split, OrtSplitStep) and isinstance(one, OrtStep)
    if chunk:  # W_e (11×8): 18 pieces, the last of 3 elements; the scalar t is never cut
        we = [p for p in split.pieces if p.whole == "theta.W_e"]
        assert len(we) == 18 and we[-1].stop - we[-1].start == 3 and we[-1].stop == 88
        assert all(p.stop - p.start <= chunk for p in split.pieces)
        assert ("t" in split.update_inputs) == (opt == "adamw")
    else:  # the default pieces are larger than every tensor here
        assert split.pieces == []
    assert len(split.buffers) == 1 and len(one.buffers) == 2
    where = {k: v.data_ptr() for k, v in split.buffers[0].items()}
    for i in range(5):
        batch = {"x": np.roll(X, i, axis=1)}
        assert split.step(batch, 0.05) == one.step(batch, 0.05), i
    got, want = split.values(), one.values()
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    # the update wrote into the buffers it read: the same memory, changed
    assert {k: v.data_ptr() for k, v in split.buffers[0].items()} == where
    assert not np.array_equal(got["theta.W_e"], step.state["theta.W_e"])
    # the halves: the gradient graph reads no optimizer state, the update graph no batch and no weights
    grad_inputs = {n.attrs["name"] for n in step.split.gradient.inputs}
    assert "x" in grad_inputs and not grad_inputs & {LR, "t", *(k for k in step.state if k[:2] in ("m.", "v."))}
    update_inputs = {n.attrs["name"] for n in step.split.update.inputs}
    assert "x" not in update_inputs and not step.split.update.params()


def _update(nodes: list, out: str = "new.w") -> onnx.ModelProto:
    from onnx import TensorProto, helper

    def value(name: str, shape: list[int]):  # type: ignore[no-untyped-def]
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    graph = helper.make_graph(nodes, "update", [value("w", [4]), value("g", [4]), value("s", [])],
                              [value(out, [4]), value("other", [4])])
    return helper.make_model(graph)


def test_the_in_place_check_refuses_a_read_after_the_write() -> None:
    from onnx import helper

    safe = _update([helper.make_node("Mul", ["s", "g"], ["d"]), helper.make_node("Sub", ["w", "d"], ["new.w"]),
                    helper.make_node("Add", ["new.w", "g"], ["other"])])
    assert in_place_problems(safe, {"new.w": "w"}) == []
    # `other` reads w but is no ancestor of the Sub that writes new.w over it: it may run after the write
    late = _update([helper.make_node("Mul", ["s", "g"], ["d"]), helper.make_node("Sub", ["w", "d"], ["new.w"]),
                    helper.make_node("Add", ["w", "g"], ["other"])])
    assert [p for p in in_place_problems(late, {"new.w": "w"}) if "need not run before new.w" in p]
    # a writer that is not elementwise (MatMul reads all of w for each element it writes)
    matmul = _update([helper.make_node("MatMul", ["w", "g"], ["new.w"]), helper.make_node("Add", ["g", "g"], ["other"])])
    assert [p for p in in_place_problems(matmul, {"new.w": "w"}) if "not an elementwise op" in p]
    # a writer that reads w broadcast to a larger output
    wide = _update([helper.make_node("Add", ["s", "g"], ["new.w"]), helper.make_node("Add", ["g", "g"], ["other"])])
    assert in_place_problems(wide, {"new.w": "s"})


@pytest.mark.parametrize("opt", OPTIMIZERS)
def test_the_step_is_standard_onnx_and_the_reference_evaluator_agrees(opt: str) -> None:
    step = _step(opt)
    proto = to_onnx(step.graph, step.frozen)
    assert {d.domain for d in proto.opset_import} <= {"", "ai.onnx"}
    onnx.checker.check_model(proto, full_check=True)
    feed = {"x": X, LR: np.asarray(0.05, np.float32), **step.state}
    names = [o.name for o in proto.graph.output]
    got = dict(zip(names, ReferenceEvaluator(proto).run(None, feed), strict=True))
    rt = make_runtime("interpreter", step.graph, step.frozen, step.state)
    loss = rt.step({"x": X}, 0.05)
    assert abs(float(got["loss"]) - loss) <= 1e-5 * abs(loss)
    want = rt.values()
    for k, v in want.items():
        np.testing.assert_allclose(got[NEW + k], v, rtol=1e-4, atol=1e-6, err_msg=k)


def test_tvm_compiles_the_same_step_and_agrees() -> None:
    step = _step("adamw")
    losses, want = _reference(step)
    rt = make_runtime("tvm", step.graph, step.frozen, step.state)
    np.testing.assert_allclose([rt.step({"x": X}, 0.05) for _ in range(3)], losses, rtol=1e-5)
    got = rt.values()
    assert all(np.allclose(got[k], want[k], rtol=1e-4, atol=1e-6) for k in want)


def test_the_step_is_written_in_its_short_forms_before_any_backend_sees_it() -> None:
    """Zeros and broadcasts are EXPANDs, a slice's transpose a PAD (ir/ops/shaped_like.py), and every
    weight gradient over the batch one product over its rows (passes/rules/batched_weight_gradient.py):
    in the IR, so the interpreter and TVM run them too, and the ONNX step is those ops' plain lowering."""
    from pseudoformer.ir import Op
    from pseudoformer.passes.training_step import fold_batched_gradients

    step = _step("sgd")
    nodes = step.graph.nodes()
    # no x < x (the zeros cast(x < x) and broadcasts where(x < x, 0, c) read it), no scatter into zeros
    assert not [n for n in nodes if n.op is Op.LT and n.src[0] is n.src[1]]
    assert not [n for n in nodes if n.op is Op.SCATTER]
    _, changed = fold_batched_gradients(step.graph, refusals := [])  # nothing left to fold, nothing refused
    assert not changed and not refusals
    assert {Op.EXPAND, Op.PAD, Op.FLATTEN} <= {n.op for n in nodes}
    nodes_onnx = to_onnx(step.graph, step.frozen).graph.node
    ops = [n.op_type for n in nodes_onnx]
    # every scatter-add is written into the cotangent it is added to, none into zeros (rules/scatter_sum.py,
    # rules/scatter_add_into.py): the loss pick's into −softmax · Σ ct, the embedding's into the unembedding's
    # gradient, gathered from W_e as stored (rules/gather_of_transpose.py: no transposed copy of W_e)
    added = [n for n in nodes if n.op in (Op.SCATTER_ADD, Op.SCATTER_ADD_ELEMENTS)]
    assert sorted(n.op.value for n in added) == ["scatter_add", "scatter_add_elements"]
    assert not [n for n in added if n.src[0].op is Op.EXPAND]
    w_e = next(n for n in step.graph.inputs if n.attrs["name"] == "theta.W_e")
    readers = [c for c in nodes if w_e in c.src]  # the lookup, the unembedding, ct · W_eᵀ, SGD's update
    assert [c.op for c in readers] == [Op.GATHER, Op.MATMUL, Op.TRANSPOSE, Op.SUB]
    assert [c.op for c in nodes if readers[2] in c.src] == [Op.MATMUL]  # onnxruntime: MatMul with transB
    # both are ScatterElements adding, the embedding's along W_e's own token axis (no ScatterND and its
    # transposes of the table)
    scatters = [n for n in nodes_onnx if n.op_type == "ScatterElements"]
    assert [[a.s for a in n.attribute if a.name == "reduction"] for n in scatters] == [[b"add"], [b"add"]]
    assert "ScatterND" not in ops
    assert {"Expand", "Pad", "Flatten"} <= set(ops) and "ConstantOfShape" not in ops  # no zeros left to write


def test_a_broadcast_update_is_not_cut_into_pieces() -> None:
    """Only a family of outputs elementwise in same-shaped inputs is cut: new.w = w − b with b broadcast
    over w's rows keeps its whole tensors, while new.u = u − η·g is cut."""
    from pseudoformer.ir import DType, Graph, Node, Op, TensorType
    from pseudoformer.passes.update_chunks import chunked_update

    def inp(name: str, *shape: int) -> Node:
        return Node(Op.INPUT, (), {"name": name, "type": TensorType(DType.float32, shape)})

    w, b, u, g, lr = inp("w", 4, 3), inp("b", 3), inp("u", 4, 3), inp("g", 4, 3), inp("lr")
    update = Graph([lr, w, b, u, g], [("new.w", Node(Op.SUB, (w, b), {})),
                                      ("new.u", Node(Op.SUB, (u, Node(Op.MUL, (lr, g), {})), {}))], {})
    chunked, pieces = chunked_update(update, 5)
    assert {p.whole for p in pieces} == {"u", "g", "new.u"}
    assert [(p.start, p.stop) for p in pieces if p.whole == "new.u"] == [(0, 5), (5, 10), (10, 12)]
    names = {n.attrs["name"] for n in chunked.inputs}
    assert {"lr", "w", "b", "u@0", "g@2"} <= names and "u" not in names
    assert [k for k, _ in chunked.outputs] == ["new.w", "new.u@0", "new.u@1", "new.u@2"]


def test_a_profiled_step_writes_nothing_into_the_current_directory(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """profile=True (benchmarks/profile_train*.py): onnxruntime's trace goes into a directory of its own under the
    system's temp dir, which end_profiling() names, and not into the current directory, as it would by default."""
    step = _step("sgd")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    rt = make_runtime("onnxruntime", step.graph, step.frozen, step.state, split=step.split, profile=True)
    rt.step({"x": X}, 0.05)
    trace = Path(rt.session.end_profiling())
    try:
        assert list(cwd.iterdir()) == []
        assert trace.is_file() and trace.parent.parent == Path(tempfile.gettempdir()) and trace.stat().st_size > 0
    finally:
        shutil.rmtree(trace.parent, ignore_errors=True)
