"""Writing a file atomically: every file pseudoformer writes goes through here.

The content goes to a temporary file beside the target, is synced, and is renamed over the target,
so a reader (onnxruntime, a server watching the path) sees the old file or the new one, never half
of one, and a crash or a full disk leaves the target as it was.

What is at the path decides whether it may be written:
  * nothing, or a regular file: written (a regular file is replaced);
  * a symbolic link: the file it leads to is written in its place, so the link stays, as `cp` does;
  * anything else (a directory, a character or block device such as /dev/null, a FIFO, a socket):
    refused. A rename would replace the device node itself (run as root, `-o /dev/null` used to
    leave a regular file at /dev/null), and writing through to a device cannot be atomic.

Temporary files are named `.NAME.pseudoformer-PID-RANDOM.tmp` (a suffix may follow, as `.so`
for TVM), so they are recognisable. While one exists, SIGTERM and SIGINT remove it before the
process ends (_LiveFiles); a run killed outright (SIGKILL, a power cut) leaves it behind, and the next write to
the same path removes such leftovers whose process is gone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from pseudoformer.errors import UsageError
from pseudoformer.regular_file import kind_of

TAG = "pseudoformer"


class OutputError(UsageError):
    """An output path that cannot be written: a missing directory, a device, no permission, a full disk."""


def write_atomic(path: str | os.PathLike, write: Callable[[IO[bytes]], Any]) -> Path:
    """Call `write` on a binary file object whose content becomes `path`, atomically; return the path written."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        write(fh)
    return Path(path)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, suffix: str = "") -> Iterator[Path]:
    """A temporary path to write in full (for libraries that write by name); on a clean exit it is
    synced and renamed to `path`, on any exception removed. Nested, the inner path is committed first."""
    target = _target(Path(path))
    _remove_leftovers(target)
    try:
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.{TAG}-{os.getpid()}-",
                                    suffix=f".tmp{suffix}")
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from None
    os.close(fd)
    tmp = Path(name)
    _live.add(tmp)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's file is private (0600); the result should not be
        yield tmp
        _fsync(tmp)
        _target(Path(path))  # again: the path may have become a device while the content was written
        os.replace(tmp, target)
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        _live.discard(tmp)


def check_output(path: str | os.PathLike) -> None:
    """Refuse, before any work, a path atomic_path would refuse (no directory, a device at the path)."""
    _target(Path(path))


def _target(path: Path) -> Path:
    """The file to replace for `path`: itself, or where its symbolic link leads; refused if not regular."""
    try:
        target = Path(os.path.realpath(path)) if path.is_symlink() else path
        if not target.parent.is_dir():
            raise OutputError(f"cannot write {path}: no directory {target.parent}")
        st = os.stat(target)
    except FileNotFoundError:
        return target
    except (OSError, ValueError) as e:  # a name too long, a NUL byte
        raise OutputError(f"cannot write {path}: {getattr(e, 'strerror', None) or e}") from None
    if not stat.S_ISREG(st.st_mode):
        via = f" (a link to {target})" if target != path else ""
        raise OutputError(f"cannot write {path}{via}: it is {kind_of(st)}, and pseudoformer replaces only "
                          "regular files; give the path of a file to write")
    return target


def leftover_pattern(target: Path) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(target.name)}\.{TAG}-(\d+)-[^/]*\.tmp[^/]*")


def _remove_leftovers(target: Path) -> None:
    """Remove temporary files of `target` left by runs that were killed: those whose process is gone."""
    pattern = leftover_pattern(target)
    try:
        names = os.listdir(target.parent)
    except OSError:
        return
    for name in names:
        m = pattern.fullmatch(name)
        if m is None or _alive(int(m.group(1))):
            continue
        with contextlib.suppress(OSError):
            os.unlink(target.parent / name)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # this process's own: a write in progress (in another thread)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process, or not ours to judge
    return True


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


class _LiveFiles:
    """The temporary files being written, removed if SIGTERM or SIGINT ends the process.

    Python turns SIGINT into KeyboardInterrupt, and atomic_path removes its file on the way out. A
    signal whose disposition is the default (SIGTERM's always, SIGINT's where Python's handler is
    not installed) would end the process at once, so while a file is live a handler is installed
    for it; an application's own handler, or an ignored signal, is left alone. The handler removes
    the files and ends the process by the same signal, as it would have ended.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.paths: set[Path] = set()
        self.lock = threading.Lock()
        self.previous: dict[int, Any] = {}

    def add(self, path: Path) -> None:
        with self.lock:
            self.paths.add(path)
            if len(self.paths) == 1 and threading.current_thread() is threading.main_thread():
                for sig in self.SIGNALS:
                    if signal.getsignal(sig) == signal.SIG_DFL:
                        self.previous[sig] = signal.signal(sig, self._ended)

    def discard(self, path: Path) -> None:
        with self.lock:
            self.paths.discard(path)
            if not self.paths and threading.current_thread() is threading.main_thread():
                for sig, handler in self.previous.items():
                    signal.signal(sig, handler)
                self.previous.clear()

    def _ended(self, signum: int, frame: Any) -> None:
        for p in list(self.paths):
            with contextlib.suppress(OSError):
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                else:
                    p.unlink()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


_live = _LiveFiles()


def remove_on_signal(path: Path) -> None:
    """Remove `path` (a temporary file or directory of this process) if SIGTERM or SIGINT ends it."""
    _live.add(path)


def keep_on_signal(path: Path) -> None:
    """Undo remove_on_signal (the path has been removed or moved into place)."""
    _live.discard(path)
