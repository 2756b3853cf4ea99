"""Training data: token ids from a .npy file, or a text file and a tokenizer, cut into sequences of a fixed
length and served in batches. Each mistake in the data is one message naming the file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from pseudoformer.errors import UsageError
from pseudoformer.file_access import FileAccessError, load_npy, read_text


def read_tokens(path: str | Path, tokenizer: str | Path | None = None) -> np.ndarray:
    """The file's token ids, one flat int64 stream (a 2-D .npy array: its rows, one after another)."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"no such data file: {path}")
    if path.suffix == ".npy":
        try:
            ids = load_npy(path, "data file")
        except FileAccessError as e:
            raise UsageError(e.message) from None
        if ids.dtype.kind not in "iu":
            raise UsageError(f"data file {path} holds {ids.dtype} values: token ids are integers (save them as "
                             "int64 or int32)")
        if ids.ndim not in (1, 2):
            raise UsageError(f"data file {path} has shape {list(ids.shape)}: token ids come as one sequence [n] or "
                             "rows of a sequence each [rows, n]")
        ids = ids.astype(np.int64).reshape(-1)
    else:
        if tokenizer is None:
            raise UsageError(f"data file {path} is text: give --tokenizer tokenizer.json to turn it into token ids "
                             "(or give token ids as a .npy file)")
        try:
            text = read_text(path, "data file", "input")
        except FileAccessError as e:
            raise UsageError(e.message) from None
        ids = np.asarray(_tokenizer(tokenizer).encode(text).ids, np.int64)
    if ids.size == 0:
        raise UsageError(f"data file {path} holds no tokens")
    return ids


def _tokenizer(path: str | Path):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer

    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise UsageError(f"no tokenizer at {path}: give a tokenizer.json, or a directory that holds one")
    try:
        return Tokenizer.from_file(str(p))
    except Exception as e:  # the tokenizers library's own parse errors
        raise UsageError(f"cannot read the tokenizer {p}: {e}") from None


def sequences(ids: np.ndarray, seq_len: int, vocabulary: int | None, where: str) -> np.ndarray:
    """The stream cut into rows of seq_len tokens (the last, shorter piece dropped), checked against the
    vocabulary."""
    if seq_len < 2:
        raise UsageError(f"--seq-len {seq_len}: a sequence needs at least 2 tokens (a token and the one after it "
                         "that the loss predicts)")
    if vocabulary is not None and ids.size:
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= vocabulary:
            bad = lo if lo < 0 else hi
            at = int(np.flatnonzero(ids == bad)[0])
            raise UsageError(f"{where}: token id {bad} (position {at}) is outside the model's vocabulary of "
                             f"{vocabulary} tokens (ids 0 to {vocabulary - 1})")
    rows = ids.size // seq_len
    if rows == 0:
        raise UsageError(f"{where} holds {ids.size} tokens, fewer than one sequence of --seq-len {seq_len}")
    return ids[: rows * seq_len].reshape(rows, seq_len)


def batches(rows: np.ndarray, batch_size: int, seed: int, epoch: int) -> Iterator[np.ndarray]:
    """One epoch's batches, the rows shuffled by (seed, epoch); a last smaller batch is kept."""
    if batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, got {batch_size}")
    order = np.random.default_rng([seed, epoch]).permutation(len(rows))
    for i in range(0, len(rows), batch_size):
        yield rows[order[i:i + batch_size]]
