"""Opening a path only if it is a regular file, and reading at most so many bytes of it.

The primitives under file_access.py (which words the messages) and under errors.py (which quotes
a source line in a diagnostic); they raise OSError and know nothing of pseudoformer's errors.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
         stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory", stat.S_IFLNK: "a symbolic link"}


class NotRegularFile(OSError):
    """The path is something other than a regular file: `kind` says what."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def kind_of(st: os.stat_result) -> str:
    return KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")


def is_null_device(st: os.stat_result) -> bool:
    if not stat.S_ISCHR(st.st_mode):
        return False
    try:
        return st.st_rdev == os.stat(os.devnull).st_rdev
    except OSError:
        return False


def open_regular(path: str | Path, *, allow_null: bool = False) -> tuple[int | None, os.stat_result]:
    """An open read-only descriptor of the regular file at `path`, and its stat (None for the null
    device, when allowed). Raises NotRegularFile for anything else, OSError when it cannot be opened.

    The path is stat'ed first, so a device is refused without being opened (opening some acts), then
    opened with O_NONBLOCK (opening a FIFO would otherwise wait for a writer) and fstat'ed, so the
    descriptor is of the regular file that was checked even if the path changed in between.
    """
    try:
        st = os.stat(path)
    except ValueError as e:  # a NUL byte in the path
        raise FileNotFoundError(str(e)) from None
    if allow_null and is_null_device(st):
        return None, st
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(kind_of(st))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegularFile(kind_of(st))
    return fd, st


def read_at_most(fd: int, cap: int) -> bytes:
    """Up to cap + 1 bytes from `fd` (one more than allowed tells a file that grew past the cap)."""
    chunks, total = [], 0
    while total <= cap:
        chunk = os.read(fd, min(1 << 20, cap + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)
