"""Kind: files copied from a checkpoint into an output stay inside the checkpoint and no more open than they were.

`train`'s hf/ checkpoint and `compile --genai-folder` copy the input's tokenizer and config files. They followed
links: a tokenizer.json pointing at a private file or /etc/passwd came out as a world-readable copy. Now each copy
is a regular file whose real path lies inside the checkpoint, read under a size cap, and written with
permission bits no wider than its source's (file_access.read_inside, atomic_write.Part.mode), for every writer."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from pseudoformer.base.file_access import FileAccessError, read_inside
from tests.hostile.conftest import MODELS, TRAIN_LOSS, judge, run_cli
from tests.training import torch_cases


def _secret(tmp_path: Path) -> Path:
    secret = tmp_path / "secret.txt"
    secret.write_text('{"key": "do not copy me"}')
    secret.chmod(0o600)
    return secret


def test_read_inside_takes_files_and_links_within_and_refuses_links_out(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "real.json").write_text("{}")
    (ckpt / "real.json").chmod(0o640)
    (ckpt / "inner.json").symlink_to("real.json")
    (ckpt / "outer.json").symlink_to(_secret(tmp_path))
    (ckpt / "dangling.json").symlink_to(tmp_path / "nowhere")
    (ckpt / "dir.json").mkdir()
    assert read_inside(ckpt, "absent.json", "tokenizer file", "config") is None
    copy = read_inside(ckpt, "inner.json", "tokenizer file", "config")
    assert copy is not None and copy.data == b"{}" and copy.mode == 0o640
    for name, why in [("outer.json", "leads outside"), ("dangling.json", "leads outside"),
                      ("dir.json", "not a regular file")]:
        with pytest.raises(FileAccessError, match=why):
            read_inside(ckpt, name, "tokenizer file", "config")
    (ckpt / "big.json").write_bytes(b" " * (1 << 20 + 1))
    with pytest.raises(FileAccessError, match="more than"):
        read_inside(ckpt, "big.json", "tokenizer file", "config")


def _trained(tmp_path: Path, capfd: pytest.CaptureFixture[str]):  # noqa: ANN202
    ids = tmp_path / "ids.npy"
    np.save(ids, np.tile(np.arange(20, dtype=np.int64), 20))
    return run_cli(["train", TRAIN_LOSS, "--weights", tmp_path / "hf", "--data", ids, "--seq-len", "8", "--batch-size", "2",
                    "--steps", "1", "--lr", "1e-3", "-o", tmp_path / "out"], capfd)


def test_train_refuses_a_tokenizer_that_links_out_of_the_checkpoint(tmp_path: Path,
                                                                    capfd: pytest.CaptureFixture[str]) -> None:
    torch_cases.gpt2(tmp_path / "hf")
    (tmp_path / "hf" / "tokenizer.json").symlink_to(_secret(tmp_path))
    r = _trained(tmp_path, capfd)
    judge(r, "leads outside")
    assert not (tmp_path / "out").exists()  # refused before the first step
    assert not any("do not copy me" in p.read_text(errors="replace") for p in (tmp_path / "out").rglob("*")
                   if p.is_file())


def test_train_copies_a_private_tokenizer_no_more_open_than_it_was(tmp_path: Path,
                                                                   capfd: pytest.CaptureFixture[str]) -> None:
    torch_cases.gpt2(tmp_path / "hf")
    (tmp_path / "hf" / "tokenizer.json").write_text("{}")
    (tmp_path / "hf" / "tokenizer.json").chmod(0o600)
    r = _trained(tmp_path, capfd)
    assert r.code == 0, r.err
    copied = tmp_path / "out" / "hf" / "tokenizer.json"
    assert copied.read_text() == "{}" and stat.S_IMODE(os.stat(copied).st_mode) & 0o077 == 0
    config = tmp_path / "out" / "hf" / "config.json"  # a 0644 source keeps the mode a new file gets
    assert stat.S_IMODE(os.stat(config).st_mode) & 0o044 == 0o044 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_genai_folder_refuses_a_tokenizer_that_links_out(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    torch_cases.gpt2(tmp_path / "hf")
    (tmp_path / "hf" / "merges.txt").symlink_to(_secret(tmp_path))
    r = run_cli(["compile", MODELS / "gpt2.alg", "--weights", tmp_path / "hf", "--genai-folder", tmp_path / "g"],
                capfd)
    judge(r, "leads outside")
    assert not (tmp_path / "g" / "merges.txt").exists()
