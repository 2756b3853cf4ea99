"""open_checkpoint (pseudoformer/weights/checkpoint.py): what a --weights path is, decided in one place.

Each kind (a HF directory, a GGUF file, a safetensors file of our names) answers describe(), config(),
plan() and tokenizer(); every other path is refused with one message. A GGUF file streams a tensor at a
time, as a HF directory does: nothing is read until a tensor is loaded, a Q4_0/Q8_0 weight keeps its blocks
streamed, and a compile's peak memory does not grow with the model (measured in a child process).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

import pseudoformer
from pseudoformer.deploy import lower
from pseudoformer.ir.block_coded import LazyBlockCoded, codes_of
from pseudoformer.ir.lazy_tensor import LazyTensor
from pseudoformer.model import load
from pseudoformer.weights import WeightsError, open_checkpoint, open_weights, save_weights, tokenizer_file
from pseudoformer.weights.checkpoint import GGUFCheckpointFile, HFDirectory, SafetensorsFile, checkpoint_files
from pseudoformer.weights.gguf_format import GGUFFile
from tests.models.llama_cases import MODELS, hf_model
from tests.weights.gguf_testlib import write_gguf

SIZES = dict(hidden_size=64, intermediate_size=96, head_dim=16)


def _gguf(path: Path, fmt: Q = Q.F32, *, tied: bool = True, **sizes: object) -> Path:
    write_gguf(path, hf_model("llama", tie_word_embeddings=tied, **{**SIZES, **sizes}), "llama", lambda n, s: fmt)
    return path


def _expected(weights: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    graph = load(MODELS / "llama.alg", weights=weights, bind_weights=False).graph
    return {p.attrs["name"]: (tuple(int(d) for d in p.type.shape), "float32") for p in graph.params()}


def test_a_hf_directory(tmp_path: Path) -> None:
    hf_model("llama", **SIZES).save_pretrained(tmp_path)
    checkpoint = open_checkpoint(tmp_path)
    assert isinstance(checkpoint, HFDirectory) and checkpoint.directory == tmp_path
    assert checkpoint.describe() == f"{tmp_path} is a HuggingFace 'llama' checkpoint"
    assert checkpoint.config()["hidden_size"] == 64 and checkpoint.hyperparameters()["d_e"] == 64
    assert checkpoint.tokenizer() is None  # no tokenizer.json beside the weights
    (tmp_path / "tokenizer.json").write_text("{}")
    assert checkpoint.tokenizer().path == tmp_path / "tokenizer.json" and not checkpoint.tokenizer().gguf
    plan = checkpoint.plan(_expected(tmp_path))
    assert plan.origin["W_e"] == "model.embed_tokens.weight" and plan.private and not plan.codes
    assert sorted(checkpoint_files(tmp_path)) == sorted(tmp_path.iterdir())


def test_a_gguf_file_named_so_or_not(tmp_path: Path) -> None:
    path = _gguf(tmp_path / "tiny.gguf")
    checkpoint = open_checkpoint(path)
    assert isinstance(checkpoint, GGUFCheckpointFile) and checkpoint.directory is None
    assert checkpoint.describe() == f"{path} is a GGUF file of a 'llama' model"
    assert checkpoint.config()["model_type"] == "llama" and checkpoint.config()["tie_word_embeddings"]
    assert checkpoint.tokenizer().path == path and checkpoint.tokenizer().gguf
    plan = checkpoint.plan(_expected(path))
    assert plan.origin["W_u"] == "token_embd.weight"  # the file's own name, for a complaint
    assert set(plan.twins.items()) & {("W_u", "W_e"), ("W_e", "W_u")}  # the tie, from the mapping alone
    assert list(checkpoint_files(path)) == []
    # Ollama's blobs are GGUF files without a suffix: the magic tells
    blob = tmp_path / "sha256-0123"
    blob.write_bytes(path.read_bytes())
    assert isinstance(open_checkpoint(blob), GGUFCheckpointFile)
    assert tokenizer_file(blob).gguf and not tokenizer_file(tmp_path / "tokenizer.json").gguf


def test_a_safetensors_file_of_our_names(tmp_path: Path) -> None:
    path = tmp_path / "ours.safetensors"
    save_weights({"a": np.ones((2, 3), np.float32)}, path)
    checkpoint = open_checkpoint(path)
    assert isinstance(checkpoint, SafetensorsFile) and checkpoint.directory is None
    assert checkpoint.config() is None and checkpoint.hyperparameters() is None and checkpoint.tokenizer() is None
    plan = checkpoint.plan(["theta.a"], group="theta")
    assert list(plan.tensors) == ["theta.a"] and plan.tensors["theta.a"].shape == (2, 3) and not plan.hint
    np.testing.assert_array_equal(plan.tensors["theta.a"].load(), np.ones((2, 3)))


@pytest.mark.parametrize("make,message", [
    (lambda d: d / "nothing", "no such file or directory"),
    (lambda d: (d / "empty").mkdir() or d / "empty", "is not a HuggingFace checkpoint directory: it has no config"),
    (lambda d: (d / "notes.txt").write_text("hi") and d / "notes.txt",
     "expected a .safetensors or .gguf file or a HuggingFace checkpoint directory"),
    (lambda d: (d / "config.json").write_text("{}") and d / "config.json", "pass the checkpoint directory instead"),
    (lambda d: (d / "pytorch_model.bin").write_bytes(b"\x80") and d / "pytorch_model.bin", "only safetensors is read"),
    (lambda d: (d / "broken.gguf").write_bytes(b"GGUF\x03") and d / "broken.gguf", "truncated"),
], ids=["missing", "no-config", "unknown-kind", "config-json", "pickle", "broken-gguf"])
def test_anything_else_is_one_clear_message(tmp_path: Path, make, message: str) -> None:
    path = make(tmp_path)
    with pytest.raises(WeightsError, match=message) as e:
        open_checkpoint(path)
    assert str(path) in str(e.value)
    # the same message, and no traceback, from the command line
    proc = subprocess.run([sys.executable, "-m", "pseudoformer.cli", "compile", str(MODELS / "llama.alg"),
                           "--weights", str(path), "-o", str(tmp_path / "out.onnx")], capture_output=True, text=True)
    assert proc.returncode == 1 and message in proc.stderr and "Traceback" not in proc.stderr


def test_a_gguf_tensor_is_read_only_when_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """open_weights reads no tensor of a GGUF file; loading one parameter reads its tensor and no other."""
    path = _gguf(tmp_path / "tiny.gguf", Q.Q4_1)
    expected = _expected(path)
    origin = open_checkpoint(path).plan(expected).origin
    down = next(name for name, stored in origin.items() if stored == "blk.0.ffn_down.weight")
    read: list[str] = []
    raw = GGUFFile.raw
    monkeypatch.setattr(GGUFFile, "raw", lambda self, info: read.append(info.name) or raw(self, info))
    lazy, twins = open_weights(path, expected)
    assert read == [] and twins == {"W_e": "W_u"}
    assert all(isinstance(t, LazyTensor) for t in lazy.values()) and list(lazy) == list(expected)
    values = lazy[down].load()
    assert read == ["blk.0.ffn_down.weight"] and values.shape == expected[down][0]


def test_a_streamed_q8_0_file_keeps_its_blocks_and_compiles_as_the_loaded_one(tmp_path: Path) -> None:
    """The codes travel with the LazyTensor (LazyBlockCoded) through the finiteness check to the quantize pass:
    the streamed compile is the eagerly loaded model's, node for node and byte for byte."""
    path = _gguf(tmp_path / "q8.gguf", Q.Q8_0)
    streamed = load(MODELS / "llama.alg", weights=path, lazy_weights=True)
    eager = load(MODELS / "llama.alg", weights=path)
    assert streamed.weights.keys() == eager.weights.keys()
    coded = [name for name, w in streamed.weights.items() if isinstance(w, LazyBlockCoded)]
    assert coded and all(codes_of(eager.weights[name]) is not None for name in coded)
    a, b = lower(streamed), lower(eager)
    assert [n.op_type for n in a.graph.node].count("MatMulNBits") > 0
    assert list(a.graph.node) == list(b.graph.node)
    assert {t.name: t.raw_data for t in a.graph.initializer} == {t.name: t.raw_data for t in b.graph.initializer}


# Runs `pseudoformer ARGS` in a child of its own and prints the child's peak RSS (kB). The launcher is a fresh
# interpreter: a child started straight from this test process would count this process's RSS as its own
# (Linux carries the parent's high-water mark through vfork and exec into the child's ru_maxrss).
LAUNCH = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, "-m", "pseudoformer.cli", *sys.argv[1:]])
_, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _peak_rss(args: list[str]) -> int:
    """Peak RSS in bytes of `pseudoformer ARGS` run in a process of its own (that process alone)."""
    proc = subprocess.run([sys.executable, "-c", LAUNCH, *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split()[-1]) * 1024


def test_a_gguf_compile_holds_a_tensor_at_a_time(tmp_path: Path) -> None:
    """Two F16 GGUF files of one Llama shape, 1 and 7 layers, each compiled in a fresh process: the 6 more
    layers are 72 MB of float32 weights (36 MB of file), which a compile reading the file whole held at once
    (and the file's pages besides: 108 MB more). Streamed, a tensor at a time and each tensor's pages of the
    file let go once read, the peak grew by 6 MB (the graph of 6 more layers). Both read the same largest
    tensor, which cancels out."""
    peaks, weights = {}, {}
    sizes = dict(hidden_size=512, intermediate_size=1536, head_dim=64, num_attention_heads=8, vocab_size=256)
    for layers in (1, 7):
        path = _gguf(tmp_path / f"L{layers}.gguf", Q.F16, num_hidden_layers=layers, **sizes)
        weights[layers] = 4 * sum(a.size for a in pseudoformer.load(MODELS / "llama.alg", weights=path,
                                                                     lazy_weights=True).weights.values())
        out = tmp_path / f"L{layers}.onnx"
        peaks[layers] = _peak_rss(["compile", str(MODELS / "llama.alg"), "--weights", str(path), "-o", str(out)])
        out.unlink()
    more, grown = weights[7] - weights[1], peaks[7] - peaks[1]
    assert grown < more / 4, f"peak RSS grew {grown / 1e6:.0f} MB for {more / 1e6:.0f} MB more weights"
