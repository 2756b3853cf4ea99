"""Saving: atomic, never a partial file at the destination, weights in a side file when too big."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx_cases import I64, assert_matches, block, block_inputs, block_params, inp, lower_checked, op, param

from pseudoformer.backends.onnx import BackendError, OnnxRunner, save_model, to_onnx
from pseudoformer.backends.onnx import save as save_module
from pseudoformer.backends.onnx.save import data_path
from pseudoformer.ir.graph import Graph
from pseudoformer.ir.ops import Op

BIG = {"d": 32, "vocab": 64, "lmax": 32}  # big enough that the embeddings pass the 1 KiB inline limit


@pytest.fixture
def model() -> onnx.ModelProto:
    return lower_checked(block(), block_params())


def _listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_save_writes_a_loadable_model_and_nothing_else(tmp_path, model):
    path = save_model(model, tmp_path / "m.onnx")
    assert path == tmp_path / "m.onnx"
    assert _listing(tmp_path) == ["m.onnx"]
    assert onnx.load(str(path)).SerializeToString() == model.SerializeToString()
    feed = block_inputs(2, 3)
    assert_matches(OnnxRunner(path).run(feed), OnnxRunner(model).run(feed))


def _failing_save(*args, **kwargs):
    # Write part of a file where the real save would, then fail, as a full disk would.
    Path(args[1]).write_bytes(b"partial")
    raise OSError("disk full")


def test_a_failed_write_leaves_no_partial_file(tmp_path, model, monkeypatch):
    monkeypatch.setattr(save_module.onnx, "save_model", _failing_save)
    with pytest.raises(BackendError, match="disk full"):
        save_model(model, tmp_path / "m.onnx")
    assert _listing(tmp_path) == []


def test_a_failed_overwrite_keeps_the_old_file(tmp_path, model, monkeypatch):
    path = save_model(model, tmp_path / "m.onnx")
    before = path.read_bytes()
    monkeypatch.setattr(save_module.onnx, "save_model", _failing_save)
    with pytest.raises(BackendError):
        save_model(model, path)
    assert path.read_bytes() == before
    assert _listing(tmp_path) == ["m.onnx"]


def test_an_unwritable_directory_is_reported(tmp_path, model):
    with pytest.raises(BackendError, match="no directory"):
        save_model(model, tmp_path / "missing" / "m.onnx")
    # A path through a regular file fails for every user, root included (ENOTDIR).
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(BackendError):
        save_model(model, blocker / "m.onnx")
    assert _listing(tmp_path) == ["a-file"]
    if os.geteuid() == 0:
        return  # root writes into read-only directories; the case above covers the failure path
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(BackendError, match="cannot write"):
            save_model(model, locked / "m.onnx")
        assert _listing(locked) == []
    finally:
        locked.chmod(0o700)


def test_big_models_put_their_weights_in_one_side_file(tmp_path):
    params = block_params(**BIG)
    model = lower_checked(block(**BIG), params)
    before = model.SerializeToString()
    path = save_model(model, tmp_path / "m.onnx", external_threshold=0)
    assert _listing(tmp_path) == ["m.onnx", "m.onnx.data"]
    assert model.SerializeToString() == before  # the caller's model is lent, not changed
    assert data_path(path).stat().st_size > path.stat().st_size
    stored = onnx.load(str(path), load_external_data=False)
    external = {t.name for t in stored.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    assert {"W_e", "W_p"} <= external
    assert {e.value for t in stored.graph.initializer for e in t.external_data if e.key == "location"} == {"m.onnx.data"}
    feed = block_inputs(2, 5, vocab=BIG["vocab"])
    assert_matches(OnnxRunner(path).run(feed), OnnxRunner(model).run(feed))


def test_a_failed_big_save_leaves_neither_file(tmp_path, monkeypatch):
    model = lower_checked(block(**BIG), block_params(**BIG))
    before = model.SerializeToString()
    monkeypatch.setattr(save_module.onnx, "save_model", _failing_save)
    with pytest.raises(BackendError):
        save_model(model, tmp_path / "m.onnx", external_threshold=0)
    assert _listing(tmp_path) == []
    assert model.SerializeToString() == before


@pytest.mark.slow  # about 40 s: writes and reads back 2 GiB
def test_a_model_over_two_gib_saves_and_runs(tmp_path):
    rows = 2**31 // (4 * 1024) + 1024  # a [rows, 1024] float32 table just over 2 GiB
    x = inp("x", I64, "n")
    g = Graph([x], [("y", op(Op.GATHER, param("table", rows, 1024), x, axis=0))])
    table = np.zeros((rows, 1024), np.float32)
    table[-1] = 7.0
    model = to_onnx(g, {"table": table})  # too big to check in memory: checked from the path
    del table
    path = save_model(model, tmp_path / "big.onnx")
    assert _listing(tmp_path) == ["big.onnx", "big.onnx.data"]
    assert path.stat().st_size < 2**20
    out = OnnxRunner(path).run({"x": np.array([rows - 1, 0])})["y"]
    assert (out[0] == 7).all() and (out[1] == 0).all()


def _lazy_lowered(calls: list[str]):
    """block()'s LoweredModel with every weight a LazyTensor that records when it is computed."""
    from pseudoformer.backends.onnx.compile import lower_model
    from pseudoformer.backends.onnx.lower import LoweredModel
    from pseudoformer.ir.lazy_tensor import LazyTensor

    eager = lower_model(block(**BIG), block_params(**BIG))

    def lazy(name: str, arr: np.ndarray) -> LazyTensor:
        return LazyTensor(arr.shape, arr.dtype, lambda: (calls.append(name), arr.copy())[1])

    return eager, LoweredModel(eager.skeleton, {k: lazy(k, v) for k, v in eager.weights.items()})


@pytest.mark.parametrize("threshold", [None, 0])
def test_lazy_weights_are_computed_once_each_as_they_are_written(tmp_path, threshold):
    calls: list[str] = []
    eager, lazy = _lazy_lowered(calls)
    assert calls == []  # lowering, the checker and the sizes need no values
    save_model(eager, tmp_path / "eager.onnx", external_threshold=threshold)
    save_model(lazy, tmp_path / "lazy.onnx", external_threshold=threshold)
    assert sorted(calls) == sorted(eager.weights)  # each once, by the writer
    a, b = onnx.load(str(tmp_path / "eager.onnx")), onnx.load(str(tmp_path / "lazy.onnx"))
    assert {t.name: t.raw_data for t in a.graph.initializer} == {t.name: t.raw_data for t in b.graph.initializer}


def test_a_disk_without_room_is_refused_before_writing(tmp_path, model, monkeypatch):
    path = save_model(model, tmp_path / "m.onnx")
    before = path.read_bytes()
    _, lazy = _lazy_lowered(calls := [])
    free = type("Usage", (), {"free": 1000, "total": 10**9, "used": 10**9})()
    monkeypatch.setattr(save_module.shutil, "disk_usage", lambda p: free)
    with pytest.raises(BackendError, match=r"takes .* and its disk has 1000 bytes free"):
        save_model(lazy, path)
    assert calls == []  # refused before any weight was computed
    assert path.read_bytes() == before and _listing(tmp_path) == ["m.onnx"]
