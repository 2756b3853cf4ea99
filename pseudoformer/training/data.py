"""Training data: token ids from a .npy file, or a text file and a tokenizer, cut into sequences of a fixed
length and served in batches; or, for EDTraining, pairs (z_n, x_n) from a .npz file whose arrays z and x
hold one example per row (`read_pairs`). Each mistake in the data is one message naming the file."""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from pseudoformer.base.errors import UsageError
from pseudoformer.base.file_access import FileAccessError, load_npy, read_text, regular_file
from pseudoformer.base.limits import FILE_CAPS, show_bytes
from pseudoformer.tokenizer import open_tokenizer


def read_tokens(path: str | Path, tokenizer: str | Path | None = None) -> np.ndarray:
    """The file's token ids, one flat stream in the smallest integer type that holds them (a 2-D .npy array: its
    rows, one after another); a batch is widened to int64 when it is fed (training/loop.py)."""
    path = Path(path)
    _regular(path)
    if path.suffix == ".npy":
        try:
            ids = load_npy(path, "data file", mapped=True)  # memory-mapped: read a batch at a time
        except FileAccessError as e:
            raise UsageError(e.message) from None
        if ids.dtype.kind not in "iu":
            raise UsageError(f"data file {path} holds {ids.dtype} values: token ids are integers (save them as "
                             "int64 or int32)")
        if ids.ndim not in (1, 2):
            raise UsageError(f"data file {path} has shape {list(ids.shape)}: token ids come as one sequence [n] or "
                             "rows of a sequence each [rows, n]")
        ids = ids.reshape(-1)  # in the file's own integer type: a 700 MB uint8 stream is not widened to 5.6 GB
    else:
        if tokenizer is None:
            raise UsageError(f"data file {path} is text: give --tokenizer tokenizer.json to turn it into token ids "
                             "(or give token ids as a .npy file)")
        try:
            text = read_text(path, "data file", "input")
        except FileAccessError as e:
            raise UsageError(e.message) from None
        encoded = open_tokenizer(tokenizer).encode(text)
        ids = np.asarray(encoded, np.min_scalar_type(max(encoded, default=0)))  # the smallest type that fits
    if ids.size == 0:
        raise UsageError(f"data file {path} holds no tokens")
    return ids


def _regular(path: Path) -> None:
    """A data file is a regular file: a directory, a device (/dev/zero) or a FIFO is said to be one, before its
    name's suffix decides how it is read."""
    try:
        regular_file(path, "data file", FILE_CAPS["input"])
    except FileAccessError as e:
        raise UsageError(e.message) from None


def sequences(ids: np.ndarray, seq_len: int, vocabulary: int | None, where: str) -> np.ndarray:
    """The stream cut into rows of seq_len tokens (the last, shorter piece dropped), checked against the
    vocabulary."""
    if ids.dtype.kind not in "iu":
        raise UsageError(f"{where} holds {ids.dtype} values: token ids are integers")
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


def read_pairs(data: str | Path | Mapping[str, np.ndarray], names: Sequence[str],
               vocabulary: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Pairs (z_n, x_n), one example per row: a .npz file (np.savez) or a mapping with an integer array per
    name (`names`, the training algorithm's: z and x), each [N, its length], the same N; each array checked
    against the vocabulary of the input it feeds (`vocabulary`, by name)."""
    where = "the data" if isinstance(data, Mapping) else str(data)
    if not isinstance(data, Mapping):
        path = Path(data)
        _regular(path)
        if path.suffix != ".npz":
            raise UsageError(f"data file {path}: a training algorithm over pairs ({', '.join(names)}) reads a .npz "
                             f"file with one integer array per member, each [examples, length] "
                             f"(np.savez(path, {', '.join(f'{n}=…' for n in names)}))")
        data = _read_npz(path)
    missing = [n for n in names if n not in data]
    if missing:
        raise UsageError(f"{where} has no array {', '.join(missing)} (it has {', '.join(sorted(data)) or 'none'}): "
                         f"pairs come as arrays {', '.join(names)}")
    out = {}
    for n in names:
        a = np.asarray(data[n])
        if a.dtype.kind not in "iu" or a.ndim != 2 or a.shape[1] < 1:
            raise UsageError(f"{where}: array {n} is {a.dtype}{list(a.shape)}; it must hold token ids (integers), "
                             "one example per row: [examples, length]")
        if n in vocabulary and a.size and (int(a.min()) < 0 or int(a.max()) >= vocabulary[n]):
            bad = int(a.min()) if int(a.min()) < 0 else int(a.max())
            row = int(np.argwhere(a == bad)[0][0])
            raise UsageError(f"{where}: token id {bad} in {n} (example {row}) is outside the model's vocabulary of "
                             f"{vocabulary[n]} tokens (ids 0 to {vocabulary[n] - 1})")
        out[n] = a.astype(np.int64)
    counts = {n: len(a) for n, a in out.items()}
    if len(set(counts.values())) != 1:
        raise UsageError(f"{where}: the pairs' arrays have different numbers of examples ({counts})")
    if not next(iter(counts.values())):
        raise UsageError(f"{where} holds no examples")
    if "x" in out and out["x"].shape[1] < 2:
        raise UsageError(f"{where}: x has {out['x'].shape[1]} token per example; the next-token loss needs at least 2")
    return out


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of a .npz file, each member's size checked against the input cap before it is inflated: a
    member of a few KiB can inflate to gigabytes, and zipfile stops at the size a member declares."""
    try:
        with zipfile.ZipFile(path) as archive:
            sizes = {info.filename: info.file_size for info in archive.infolist()}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise UsageError(f"cannot read data file {path}: not a .npz archive ({e})") from None
    cap = FILE_CAPS["input"]
    if (total := sum(sizes.values())) > cap:
        raise UsageError(f"data file {path} inflates to {show_bytes(total)}, more than the {show_bytes(cap)} an "
                         "input may be")
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {k: archive[k] for k in archive.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as e:
        raise UsageError(f"cannot read data file {path}: {e}") from None


def batches(rows: np.ndarray | Mapping[str, np.ndarray], batch_size: int, seed: int, epoch: int,
            shuffle: bool = True) -> Iterator[np.ndarray | dict[str, np.ndarray]]:
    """One epoch's batches (a last smaller batch is kept): the rows in order, as the paper's
    `for n = 1, 2, …, N_data` runs, or, with `shuffle`, in the order `epoch_order` gives (every array of
    pairs alike)."""
    if batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, got {batch_size}")
    count = len(next(iter(rows.values()))) if isinstance(rows, Mapping) else len(rows)
    order = epoch_order(count, seed, epoch) if shuffle else np.arange(count)
    for i in range(0, count, batch_size):
        pick = order[i:i + batch_size]
        yield {k: a[pick] for k, a in rows.items()} if isinstance(rows, Mapping) else rows[pick]


def epoch_order(count: int, seed: int, epoch: int) -> np.ndarray:
    """The shuffled order of the examples in epoch `epoch` (from 0): numpy's
    `np.random.default_rng([seed, epoch]).permutation(count)`, so that another framework can follow it."""
    return np.random.default_rng([seed, epoch]).permutation(count)


# The first word of the masking draws' seed, so that they never share a stream with a shuffle's.
MASK_STREAM = 0x6D61736B  # "mask"


def masked_positions(shape: tuple[int, ...], p_mask: float, seed: int, epoch: int, batch: int) -> np.ndarray:
    """ETraining's lines 4–6 for the batch `batch` (from 0) of epoch `epoch` (from 0): position t of row n
    is masked where `np.random.default_rng([0x6D61736B, seed, epoch, batch]).random(shape)[n, t] < p_mask`
    (one uniform draw in [0, 1) per token, row by row), the documented generator a torch run can replay."""
    return np.random.default_rng([MASK_STREAM, seed, epoch, batch]).random(shape) < p_mask


def token_count(batch: np.ndarray | Mapping[str, np.ndarray]) -> int:
    """The tokens a batch feeds the model (both members of pairs)."""
    return sum(a.size for a in batch.values()) if isinstance(batch, Mapping) else batch.size
