"""Training data: token ids from a .npy file, or a text file and a tokenizer, cut into sequences of a fixed
length and served in batches; or, for EDTraining, pairs (z_n, x_n) from a .npz file whose arrays z and x
hold one example per row (`read_pairs`). Each mistake in the data is one message naming the file."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from pseudoformer.base.errors import UsageError
from pseudoformer.base.file_access import FileAccessError, load_npy, read_text


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


def read_pairs(data: str | Path | Mapping[str, np.ndarray], names: Sequence[str],
               vocabulary: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Pairs (z_n, x_n), one example per row: a .npz file (np.savez) or a mapping with an integer array per
    name (`names`, the training algorithm's: z and x), each [N, its length], the same N; each array checked
    against the vocabulary of the input it feeds (`vocabulary`, by name)."""
    where = "the data" if isinstance(data, Mapping) else str(data)
    if not isinstance(data, Mapping):
        path = Path(data)
        if not path.exists():
            raise UsageError(f"no such data file: {path}")
        if path.suffix != ".npz":
            raise UsageError(f"data file {path}: a training algorithm over pairs ({', '.join(names)}) reads a .npz "
                             f"file with one integer array per member, each [examples, length] "
                             f"(np.savez(path, {', '.join(f'{n}=…' for n in names)}))")
        try:
            with np.load(path, allow_pickle=False) as archive:
                data = {k: archive[k] for k in archive.files}
        except (OSError, ValueError) as e:
            raise UsageError(f"cannot read data file {path}: {e}") from None
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


def batches(rows: np.ndarray | Mapping[str, np.ndarray], batch_size: int, seed: int, epoch: int,
            ) -> Iterator[np.ndarray | dict[str, np.ndarray]]:
    """One epoch's batches, the rows (of every array alike, for pairs) shuffled by (seed, epoch); a last
    smaller batch is kept."""
    if batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, got {batch_size}")
    count = len(next(iter(rows.values()))) if isinstance(rows, Mapping) else len(rows)
    order = np.random.default_rng([seed, epoch]).permutation(count)
    for i in range(0, count, batch_size):
        pick = order[i:i + batch_size]
        yield {k: a[pick] for k, a in rows.items()} if isinstance(rows, Mapping) else rows[pick]


def token_count(batch: np.ndarray | Mapping[str, np.ndarray]) -> int:
    """The tokens a batch feeds the model (both members of pairs)."""
    return sum(a.size for a in batch.values()) if isinstance(batch, Mapping) else batch.size
