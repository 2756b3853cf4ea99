"""The compile fast path: a LoweredModel (graph + weight arrays) saved without building its protobuf.

What it must keep from the whole-ModelProto path: the same file byte for byte, atomic writes, the
external-data side file past a threshold, onnx.checker's verdict, and models that onnxruntime
loads and that agree with the interpreter.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from hf_cases import BERT, GPT2, small_bert_mlm, small_gpt2
from onnx_cases import I64, assert_matches, block, block_inputs, block_params, inp, op, param

import pseudoformer
from pseudoformer.backends.onnx import DEFAULT_OPSET, BackendError, OnnxRunner, save_model
from pseudoformer.backends.onnx import save as save_module
from pseudoformer.backends.onnx.compile import lower_model, to_onnx
from pseudoformer.backends.onnx.lower import LoweredModel, check_structure
from pseudoformer.backends.onnx.save import data_path
from pseudoformer.base.errors import UsageError
from pseudoformer.ir import interpreter
from pseudoformer.ir.graph import Graph
from pseudoformer.ir.ops import Op

BIG = {"d": 32, "vocab": 64, "lmax": 32}  # the embeddings pass the 1 KiB inline limit of external data


def _listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_file_is_the_serialised_model_byte_for_byte(tmp_path, dtype):
    lowered = lower_model(block(**BIG), block_params(**BIG), dtype=dtype)
    assert isinstance(lowered, LoweredModel) and not lowered.skeleton.graph.initializer
    path = save_model(lowered, tmp_path / "m.onnx")
    assert _listing(tmp_path) == ["m.onnx"]
    whole = lowered.to_proto()
    assert path.read_bytes() == whole.SerializeToString()
    assert path.read_bytes() == to_onnx(block(**BIG), block_params(**BIG), dtype=dtype).SerializeToString()
    # set to the lowest that carries the opset, not onnx's default (onnxruntime refuses IR 14)
    assert onnx.load(str(path)).ir_version == onnx.helper.find_min_ir_version_for([onnx.helper.make_opsetid("", DEFAULT_OPSET)])
    onnx.checker.check_model(str(path), full_check=True)


def test_the_saved_model_runs_as_the_interpreter_does(tmp_path):
    graph, params = block(**BIG), block_params(**BIG)
    path = save_model(lower_model(graph, params), tmp_path / "m.onnx")
    runner = OnnxRunner(path)
    for batch, seq in [(1, 1), (2, 5), (3, 8)]:
        feed = block_inputs(batch, seq, vocab=BIG["vocab"])
        assert_matches(runner.run(feed), interpreter.run(graph, feed, params))


def _fail_after_some_weights(monkeypatch, at: int = 3):
    """The `at`-th weight's write fails, as a full disk would, after the model's start is on disk."""
    calls = {"n": 0}
    real = save_module._bytes_of

    def failing(arr):
        calls["n"] += 1
        if calls["n"] == at:
            raise OSError(28, "No space left on device")
        return real(arr)

    monkeypatch.setattr(save_module, "_bytes_of", failing)
    return calls


def test_a_write_failing_half_way_leaves_no_file(tmp_path, monkeypatch):
    lowered = lower_model(block(**BIG), block_params(**BIG))
    calls = _fail_after_some_weights(monkeypatch)
    with pytest.raises(BackendError, match="no space left on device"):
        save_model(lowered, tmp_path / "m.onnx")
    assert calls["n"] == 3
    assert _listing(tmp_path) == []


def test_a_write_failing_half_way_keeps_the_old_file(tmp_path, monkeypatch):
    lowered = lower_model(block(**BIG), block_params(**BIG))
    path = save_model(lowered, tmp_path / "m.onnx")
    before = path.read_bytes()
    _fail_after_some_weights(monkeypatch)
    with pytest.raises(BackendError):
        save_model(lower_model(block(**BIG), block_params(**BIG, seed=5)), path)
    assert path.read_bytes() == before
    assert _listing(tmp_path) == ["m.onnx"]


@pytest.mark.parametrize("threshold", [0, 4096])
def test_past_the_threshold_the_weights_go_to_one_side_file(tmp_path, threshold):
    graph, params = block(**BIG), block_params(**BIG)
    lowered = lower_model(graph, params)
    assert lowered.nbytes > threshold
    path = save_model(lowered, tmp_path / "m.onnx", external_threshold=threshold)
    assert _listing(tmp_path) == ["m.onnx", "m.onnx.data"]
    assert not lowered.skeleton.graph.initializer  # the lowered model is lent, not changed
    stored = onnx.load(str(path), load_external_data=False)
    outside = {t.name: {e.key: e.value for e in t.external_data} for t in stored.graph.initializer
               if t.data_location == onnx.TensorProto.EXTERNAL}
    assert {name for name, arr in params.items() if arr.nbytes >= 1024} == set(outside) >= {"W_e", "W_p"}
    assert {e["location"] for e in outside.values()} == {"m.onnx.data"}
    assert all(int(e["offset"]) % 4096 == 0 for e in outside.values())  # onnxruntime can map them
    onnx.checker.check_model(str(path), full_check=True)
    # Same initializers, same bytes, as the model saved whole.
    back = onnx.load(str(path))
    assert [t.name for t in back.graph.initializer] == list(lowered.weights)
    for t in back.graph.initializer:
        assert onnx.numpy_helper.to_array(t).tobytes() == lowered.weights[t.name].tobytes()
    feed = block_inputs(2, 5, vocab=BIG["vocab"])
    assert_matches(OnnxRunner(path).run(feed), interpreter.run(graph, feed, params))


def test_a_failed_external_save_leaves_neither_file(tmp_path, monkeypatch):
    lowered = lower_model(block(**BIG), block_params(**BIG))
    calls = _fail_after_some_weights(monkeypatch, at=2)  # W_e is in the side file, W_p fails
    with pytest.raises(BackendError, match="no space left"):
        save_model(lowered, tmp_path / "m.onnx", external_threshold=0)
    assert calls["n"] == 2
    assert _listing(tmp_path) == []


def test_the_checker_still_sees_a_broken_graph():
    lowered = lower_model(block(), block_params())
    bad = LoweredModel(_copy(lowered.skeleton), lowered.weights)
    bad.skeleton.graph.node[-1].input[0] = "nowhere"  # a value nothing defines
    with pytest.raises(onnx.checker.ValidationError):
        check_structure(bad)
    # A weight whose type does not fit its use fails shape inference, though its bytes never reach it.
    wrong = dict(lowered.weights, W_e=lowered.weights["W_e"][:3].copy())
    with pytest.raises((onnx.checker.ValidationError, onnx.shape_inference.InferenceError)):
        check_structure(LoweredModel(lowered.skeleton, wrong))


def test_a_weight_named_like_an_input_is_refused():
    lowered = lower_model(block(), block_params())
    clash = dict(lowered.weights, x=np.zeros(4, np.float32))
    with pytest.raises(onnx.checker.ValidationError, match="x"):
        check_structure(LoweredModel(lowered.skeleton, clash))


def test_weights_must_be_raw_data_as_they_are():
    skeleton = lower_model(block(), block_params()).skeleton
    with pytest.raises(ValueError, match="C-contiguous"):
        LoweredModel(skeleton, {"W_e": np.zeros((4, 3), np.float32).T})
    with pytest.raises(ValueError, match="little-endian"):
        LoweredModel(skeleton, {"W_e": np.zeros(3, ">f4")})


def _copy(m: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(m)
    return out


# ---- through pseudoformer.compile, with HuggingFace checkpoints


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf")
    small_gpt2().save_pretrained(root / "gpt2")
    small_bert_mlm().save_pretrained(root / "bert")
    return {"gpt2": root / "gpt2", "bert": root / "bert"}


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_compile_and_save_with_hf_weights(tmp_path, checkpoints, name):
    compiled = pseudoformer.compile(GPT2 if name == "gpt2" else BERT, weights=checkpoints[name])
    path = compiled.save(tmp_path / f"{name}.onnx")
    assert _listing(tmp_path) == [f"{name}.onnx"]
    onnx.checker.check_model(str(path), full_check=True)
    assert path.read_bytes() == compiled.onnx.SerializeToString()  # .onnx, built on demand, is the file
    runner = OnnxRunner(path)
    for seed, (batch, seq) in enumerate([(1, 7), (2, 16)]):
        x = np.random.default_rng(seed).integers(0, 101, size=(batch, seq), dtype=np.int64)
        want = compiled.model.run(x=x)
        assert_matches(runner.run({"x": x}), want)


def test_save_writes_what_onnx_shows_once_it_was_asked_for(tmp_path, checkpoints):
    compiled = pseudoformer.compile(GPT2, weights=checkpoints["gpt2"])
    compiled.onnx.doc_string = "changed after compiling"
    path = compiled.save(tmp_path / "m.onnx")
    assert onnx.load(str(path)).doc_string == "changed after compiling"


def test_a_compile_whose_save_fails_half_way_leaves_nothing(tmp_path, checkpoints, monkeypatch):
    compiled = pseudoformer.compile(GPT2, weights=checkpoints["gpt2"])
    _fail_after_some_weights(monkeypatch)
    with pytest.raises(UsageError, match="no space left"):
        compiled.save(tmp_path / "m.onnx")
    assert _listing(tmp_path) == []


@pytest.mark.slow  # writes and reads back 2 GiB (4 s here, more on a slow disk)
def test_a_lowered_model_over_two_gib_saves_with_default_settings_and_runs(tmp_path):
    rows = 2**31 // (4 * 1024) + 1024  # a [rows, 1024] float32 table just over 2 GiB
    x = inp("x", I64, "n")
    g = Graph([x], [("y", op(Op.GATHER, param("table", rows, 1024), x, axis=0))])
    table = np.zeros((rows, 1024), np.float32)
    table[-1] = 7.0
    lowered = lower_model(g, {"table": table})  # checked in memory: the checker never sees the 2 GiB
    path = save_model(lowered, tmp_path / "big.onnx")
    del lowered, table
    assert _listing(tmp_path) == ["big.onnx", "big.onnx.data"]
    assert path.stat().st_size < 2**20 and data_path(path).stat().st_size >= 2**31
    out = OnnxRunner(path).run({"x": np.array([rows - 1, 0])})["y"]
    assert (out[0] == 7).all() and (out[1] == 0).all()
