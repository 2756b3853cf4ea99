"""A broken GGUF given as --weights: one message naming the file and what is wrong, exit 1, no traceback, and no
time or memory spent on what a header merely declares (a vocabulary of 10⁹ entries is refused before it is read)."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as Q

from tests.hostile.conftest import LLAMA, judge, run_cli
from tests.models.llama_cases import hf_model
from tests.weights.gguf_testlib import write_gguf


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A valid llama GGUF: Q8_0 matrices, ffn_down Q4_0 (whose blocks are as long as IQ4_NL's)."""
    path = tmp_path_factory.mktemp("gguf") / "m.gguf"
    model = hf_model("llama", hidden_size=32, intermediate_size=64, head_dim=8, num_hidden_layers=1)
    write_gguf(path, model, "llama", lambda name, shape: Q.Q4_0 if "ffn_down" in name else Q.Q8_0)
    return path.read_bytes()


def _run(tmp_path: Path, data: bytes, capfd: pytest.CaptureFixture[str], name: str = "m.gguf"):
    path = tmp_path / name
    path.write_bytes(data)
    return run_cli(["run", LLAMA, "--weights", path, "--input", "x=[[1, 2]]", "-o", tmp_path / "y.npz"], capfd)


def _after(data: bytes, key: bytes) -> int:
    """The offset just past a metadata key or tensor name."""
    return data.index(key) + len(key)


def test_the_base_loads(tmp_path: Path, base: bytes, capfd: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path, base, capfd).code == 0


def test_not_a_gguf_file(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    judge(_run(tmp_path, b"this is some text, not a model\n", capfd), "not a GGUF file")


@pytest.mark.parametrize("where", ["header", "data"])
def test_truncated(tmp_path: Path, base: bytes, capfd: pytest.CaptureFixture[str], where: str) -> None:
    cut = _after(base, b"tokenizer.ggml.tokens") + 40 if where == "header" else len(base) - 100
    r = _run(tmp_path, base[:cut], capfd)
    judge(r, "truncated")
    assert str(tmp_path / "m.gguf") in r.err


def test_a_tensor_overrunning_the_file(tmp_path: Path, base: bytes, capfd: pytest.CaptureFixture[str]) -> None:
    data = bytearray(base)
    at = _after(base, b"token_embd.weight") + 4 + 8  # past n_dims and ne0: ne1, the rows
    data[at:at + 8] = struct.pack("<Q", 1 << 30)
    judge(_run(tmp_path, bytes(data), capfd), "'token_embd.weight' (Q8_0, shape (1073741824, 32)) needs bytes")


def test_an_unknown_architecture(tmp_path: Path, base: bytes, capfd: pytest.CaptureFixture[str]) -> None:
    data = bytearray(base)
    at = _after(base, b"general.architecture") + 4 + 8  # past the type and the string's length
    data[at:at + 5] = b"gptzz"
    judge(_run(tmp_path, bytes(data), capfd), "architecture 'gptzz' is not supported; supported: gemma2, gemma3, "
          "gptneox, llama, mistral, mixtral, phi3, qwen2, qwen3")


def test_metadata_of_the_wrong_type(tmp_path: Path, base: bytes, capfd: pytest.CaptureFixture[str]) -> None:
    data = bytearray(base)
    at = _after(base, b"llama.block_count")
    data[at:at + 4] = struct.pack("<I", 6)  # UINT32 → FLOAT32, the same 4 bytes
    judge(_run(tmp_path, bytes(data), capfd), "metadata llama.block_count is FLOAT32, not an integer")


def test_a_vocabulary_of_a_billion_entries(tmp_path: Path, base: bytes, capfd: pytest.CaptureFixture[str]) -> None:
    data = bytearray(base)
    at = _after(base, b"tokenizer.ggml.tokens") + 8  # past the array's type and its items' type
    data[at:at + 8] = struct.pack("<Q", 10**9)
    start = time.perf_counter()
    judge(_run(tmp_path, bytes(data), capfd), "'tokenizer.ggml.tokens' declares 1,000,000,000 entries")
    assert time.perf_counter() - start < 10


def test_a_format_not_read_is_refused_by_name(tmp_path: Path, base: bytes, capfd: pytest.CaptureFixture[str]) -> None:
    data = bytearray(base)
    at = _after(base, b"blk.0.ffn_down.weight") + 4 + 2 * 8  # past n_dims and two dims: the ggml type
    data[at:at + 4] = struct.pack("<I", Q.IQ4_NL)
    judge(_run(tmp_path, bytes(data), capfd), "'blk.0.ffn_down.weight' is IQ4_NL, a format not read here")


def test_a_fifo_is_refused_unread(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    import os

    os.mkfifo(tmp_path / "m.gguf")  # opening it for reading would wait for a writer
    r = run_cli(["run", LLAMA, "--weights", tmp_path / "m.gguf", "--input", "x=[[1, 2]]", "-o", tmp_path / "y.npz"],
                capfd)
    judge(r, "is a FIFO (named pipe), not a regular file")


@pytest.mark.parametrize(("freqs", "why"), [
    ([1, 1, 2, 3, 1, 1], "it has 6 factors for RoPE's 4 frequencies"),  # head_dim 8
    ([1, 3, 2, 3], "its factors are not Llama 3's bands"),  # not rising with the wavelength
    ([1, float("nan"), 8, 8], "its factors are not all finite numbers"),
])
def test_rope_freqs_that_are_not_llama3s_scaling(tmp_path: Path, capfd: pytest.CaptureFixture[str], freqs: list,
                                                 why: str) -> None:
    import numpy as np

    path = tmp_path / "m.gguf"
    model = hf_model("llama", hidden_size=32, intermediate_size=64, head_dim=8, num_hidden_layers=1)
    write_gguf(path, model, "llama", lambda name, shape: Q.F32, rope_freqs=np.array(freqs, np.float32))
    r = run_cli(["run", LLAMA, "--weights", path, "--input", "x=[[1, 2]]", "-o", tmp_path / "y.npz"], capfd)
    judge(r, "rope_freqs.weight scales RoPE's frequencies, but " + why)
