"""Kind: training data is checked before it is read whole, and every fault in it is one message.

A .npz of pairs whose member inflates to gigabytes, a corrupt .npz, a directory or /dev/zero as --data, a
sequence longer than the model's positions, a tokenizer that fails: each was an internal error, a memory blow-up
or a misleading message. A token file stays in its own integer type (a uint8 stream is not widened to int64
whole); each batch is widened as it is fed, with the same losses."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from pseudoformer import train
from pseudoformer.base.limits import FILE_CAPS
from pseudoformer.training.data import read_pairs, read_tokens
from tests.hostile.conftest import TINY_TRAIN, TRAIN_LOSS, judge, run_cli


def _train(data: Path | str, capfd: pytest.CaptureFixture[str], *extra: str):  # noqa: ANN202
    return run_cli(["train", TRAIN_LOSS, *TINY_TRAIN, "--data", data, "--seq-len", "8", "--steps", "1", "--lr", "1e-3", *extra],
                   capfd)


def test_an_npz_member_that_inflates_past_the_cap_is_refused_before_it_is_inflated(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(FILE_CAPS, "input", 1 << 20)  # the cap (1 GiB) made small, so the bomb is too
    path = tmp_path / "pairs.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("z.npy", "w") as member:  # int8 [1, 4 MiB] of zeros: it deflates to a few KiB
            np.lib.format.write_array(member, np.zeros((1, 4 << 20), np.int8))
        with z.open("x.npy", "w") as member:
            np.lib.format.write_array(member, np.zeros((1, 4), np.int8))
    assert path.stat().st_size < 64 << 10
    with pytest.raises(Exception, match="inflates to 4.0 MiB, more than the 1.0 MiB an input may be"):
        read_pairs(path, ["z", "x"], {})


@pytest.mark.parametrize("content", [b"PK\x03\x04 not really a zip", b"", b"\x00" * 100])
def test_a_corrupt_npz_is_one_message(content: bytes, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pairs.npz"
    path.write_bytes(content)
    with pytest.raises(Exception, match="cannot read data file"):
        read_pairs(path, ["z", "x"], {})


@pytest.mark.parametrize("kind", ["directory", "device", "missing"])
def test_data_that_is_no_file_says_so(kind: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    data = {"directory": tmp_path, "device": "/dev/zero", "missing": tmp_path / "none.npy"}[kind]
    judge(_train(data, capfd), {"directory": "is a directory", "device": "is a character device",
                                "missing": "no such data file"}[kind])


def test_a_sequence_past_the_models_positions_is_refused(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ids.npy"
    np.save(path, np.tile(np.arange(20, dtype=np.int64), 20))
    r = run_cli(["train", TRAIN_LOSS, *TINY_TRAIN, "--data", path, "--seq-len", "40", "--steps", "1", "--lr", "1e-3"], capfd)
    judge(r, "has seq = 40, but the model takes at most 32")


def test_a_token_file_keeps_its_type_and_trains_as_int64_does(tmp_path: Path) -> None:
    ids = np.tile(np.arange(20), 20)
    np.save(tmp_path / "u8.npy", ids.astype(np.uint8))
    np.save(tmp_path / "i64.npy", ids.astype(np.int64))
    stream = read_tokens(tmp_path / "u8.npy")
    assert stream.dtype == np.uint8 and isinstance(stream, np.memmap)  # mapped, read a batch at a time
    defines = TINY_TRAIN[1::2]
    losses = [train(TRAIN_LOSS, tmp_path / name, defines=defines, seq_len=8, batch_size=2, steps=2, lr=1e-3,
                    progress=False).losses for name in ("u8.npy", "i64.npy")]
    assert losses[0] == losses[1]


def test_a_tokenizer_that_fails_is_one_message_naming_it(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "text.txt").write_text("hello\x00world")
    (tmp_path / "tok.json").write_text('{"model": {"type": "NoSuchModel"}}')
    judge(_train(tmp_path / "text.txt", capfd, "--tokenizer", str(tmp_path / "tok.json")),
          f"tokenizer {tmp_path / 'tok.json'} is not a tokenizers tokenizer.json")


@pytest.mark.parametrize("what", ["token", "regex"])
def test_a_tokenizer_past_the_bounds_is_refused_before_tokenizers_sees_it(what: str, tmp_path: Path,
                                                                          capfd: pytest.CaptureFixture[str]) -> None:
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    vocab = {"a": 0, "[UNK]": 1, **({"b" * 5000: 2} if what == "token" else {})}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    if what == "regex":
        tok.pre_tokenizer = pre_tokenizers.Split(Regex("(a|b)" * 1000), behavior="isolated")
    tok.save(str(tmp_path / "tok.json"))
    (tmp_path / "text.txt").write_text("a a a")
    judge(_train(tmp_path / "text.txt", capfd, "--tokenizer", str(tmp_path / "tok.json")),
          "a token of 5,000 characters" if what == "token" else "a regex of 5,000 characters")
