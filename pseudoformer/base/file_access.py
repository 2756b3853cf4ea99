"""Opening files a user names: regular files only, each kind under its size cap.

Every path pseudoformer reads from a command line, a config or a `use` line goes through here.
A FIFO, a device, a socket or a directory is refused before it is read (regular_file.py: stat,
open with O_NONBLOCK, fstat), so `--config /dev/zero` cannot fill memory and a named pipe cannot
block forever. Reads stop one byte past the cap, since a file can grow after it is checked and
/proc files report a size of 0. Messages name the file and what is wrong with it, and never quote
its contents.

The one exception is the null device, which reads as an empty file: `--config /dev/null` means
"no config".
"""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pseudoformer.base.errors import UsageError
from pseudoformer.base.limits import FILE_CAPS, available_memory, show_bytes
from pseudoformer.base.regular_file import NotRegularFile, open_regular, read_at_most

if TYPE_CHECKING:
    import numpy as np


MAX_NPY_DIMS = 32


class FileAccessError(UsageError):
    """A file that does not exist, is not a regular file, is too big, or cannot be read."""


def _os_error(path: str | Path, what: str, e: OSError) -> FileAccessError:
    if isinstance(e, NotRegularFile):
        return FileAccessError(f"{what} {path} is {e.kind}, not a regular file: pseudoformer reads only regular files")
    if isinstance(e, FileNotFoundError):
        return FileAccessError(f"no such {what}: {path}")
    if isinstance(e, NotADirectoryError):
        return FileAccessError(f"no such {what}: {path} (a part of the path is not a directory)")
    return FileAccessError(f"cannot read {what} {path}: {e.strerror or e}")


def _open(path: str | Path, what: str, *, allow_null: bool, name: str | None = None
          ) -> tuple[int | None, os.stat_result]:
    try:
        return open_regular(path, allow_null=allow_null)
    except OSError as e:
        raise _os_error(name or path, what, e) from None


def _too_big(path: str | Path, what: str, size: float, cap: int, why: str = "") -> FileAccessError:
    return FileAccessError(f"{what} {path} is {show_bytes(size)}, more than the {show_bytes(cap)} "
                           f"{why or f'a {what} may be'}")


def regular_file(path: str | Path, what: str, cap: int | None = None) -> os.stat_result:
    """Check that `path` is a regular file (of at most `cap` bytes) before a library opens it by name.

    Without a cap, the file may be no bigger than the memory available, which is what reading
    it would take.
    """
    fd, st = _open(path, what, allow_null=False)
    assert fd is not None
    os.close(fd)
    if cap is not None and st.st_size > cap:
        raise _too_big(path, what, st.st_size, cap)
    avail = available_memory()
    if cap is None and avail is not None and st.st_size > avail:
        raise _too_big(path, what, st.st_size, avail, "of memory available to read it into")
    return st


def read_bytes(path: str | Path, what: str, kind: str, *, name: str | None = None) -> bytes:
    """The bytes of the regular file `path`, of at most FILE_CAPS[kind] bytes (b"" for the null device).

    `name`: how messages call the file, when not by `path`.
    """
    cap = FILE_CAPS[kind]
    fd, st = _open(path, what, allow_null=True, name=name)
    path = name or path
    if fd is None:
        return b""
    try:
        if st.st_size > cap:
            raise _too_big(path, what, st.st_size, cap)
        data = read_at_most(fd, cap)
    except OSError as e:
        raise _os_error(path, what, e) from None
    finally:
        os.close(fd)
    if len(data) > cap:
        raise _too_big(path, what, len(data), cap)
    return data


def read_text(path: str | Path, what: str, kind: str) -> str:
    """The UTF-8 text of the regular file `path` (see read_bytes); a byte-order mark is dropped."""
    data = read_bytes(path, what, kind)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise FileAccessError(f"{what} {path} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") \
            from None


def loads_json(text: str) -> Any:
    """JSON as the standard defines it: `NaN`, `Infinity` and numbers that overflow to ±∞ (1e999), which
    Python's json module accepts, are refused (ValueError), so every number read from a JSON file is finite; so is
    JSON nested deeper than the parser's recursion goes (`[[[…]]]` a hundred thousand deep), as ValueError too."""
    try:
        return json.loads(text, parse_constant=_not_a_number, parse_float=_finite_float)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _not_a_number(word: str) -> Any:
    raise ValueError(f"{word} is not a JSON number (numbers must be finite)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is not a finite number")
    return value


def load_npy(path: str | Path, what: str, *, mapped: bool = False) -> np.ndarray:
    """A .npy array, its header checked before any data is read: a plain dtype (never unpickled), and a
    file exactly as long as the shape says, within the input cap. `mapped`: the data memory-mapped, read-only,
    instead of read (a token stream is read a batch at a time, not held whole)."""
    import numpy as np  # here: the command line imports this module, and `--version` needs no numpy

    cap = FILE_CAPS["input"]
    fd, st = _open(path, what, allow_null=False)
    assert fd is not None
    with os.fdopen(fd, "rb") as fh:
        try:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
            else:
                raise ValueError(f"format version {version[0]}.{version[1]} is not read here (1.0 and 2.0 are)")
        except Exception as e:  # noqa: BLE001 (numpy parses the header with its own tokenizer: any failure is the file's)
            raise FileAccessError(f"{what} {path} is not a .npy array ({e})") from None
        if len(shape) > MAX_NPY_DIMS:  # numpy makes no array of more (its limit is 64), and no input has them
            raise FileAccessError(f"{what} {path} has {len(shape)} dimensions; an input has at most {MAX_NPY_DIMS}")
        if dtype.hasobject:
            raise FileAccessError(f"{what} {path} holds Python objects, which only unpickling would read; "
                                  "pseudoformer never unpickles")
        need = int(np.prod(shape, dtype=object)) * dtype.itemsize
        have = st.st_size - fh.tell()
        if need > cap:
            raise _too_big(path, what, need, cap, "an input may be")
        if have != need:
            raise FileAccessError(f"{what} {path}: its header says shape {tuple(shape)} of {dtype}, {need:,} bytes, "
                                  f"but the file holds {have:,} bytes of data")
        if mapped:
            return np.memmap(fh, dtype=dtype, mode="r", offset=fh.tell(), shape=tuple(shape),
                             order="F" if fortran else "C")
        data = fh.read(need)
    if len(data) != need:
        raise FileAccessError(f"{what} {path} changed while it was read")
    array = np.frombuffer(data, dtype=dtype)
    return array.reshape(shape[::-1]).T if fortran else array.reshape(shape)


@dataclass(frozen=True)
class FileCopy:
    """A file read from inside a checkpoint to be written into an output: its bytes, and the widest permission
    bits the copy may have (the source's: a 0600 file is never copied world-readable)."""

    data: bytes
    mode: int


def read_inside(directory: str | Path, name: str, what: str, kind: str) -> FileCopy | None:
    """`directory/name` to copy into an output, or None when there is no such entry.

    It must be a regular file under FILE_CAPS[kind] whose real path, links resolved, lies inside `directory`'s:
    a tokenizer.json that links to /etc/passwd or a private key is refused, not copied into a folder a user
    will share. A dangling link is refused as well, since the name is there."""
    root = Path(os.path.realpath(directory))
    path = Path(directory) / name
    if not os.path.lexists(path):
        return None
    real = Path(os.path.realpath(path))
    if not real.is_relative_to(root):
        raise FileAccessError(f"{what} {path} leads outside {directory} (to {real}); pseudoformer copies only "
                              "files that lie inside the checkpoint")
    data = read_bytes(real, what, kind, name=str(path))
    return FileCopy(data, stat.S_IMODE(os.stat(real).st_mode))
