"""Writing files atomically, one file or a set of them: every file pseudoformer writes goes through here.

Each file's content goes to a temporary file beside its target, is synced, and is renamed over the
target, so a reader (onnxruntime, a server watching the path) sees the old file or the new one,
never half of one, and a crash or a full disk leaves the target as it was.

**Sets.** A model may be several files: an `.onnx` and its `.data`, a TVM `.so`, its weights and its
manifest. They are written as one set (atomic_set): every part is written in full first, then they
are renamed in a fixed order, the part that names the others last (the `.onnx`, the manifest). The
parts are placed beside the *resolved* target: when `-o` is a symbolic link, the whole set goes to
the directory the link leads to, named after the file it leads to, never split between two places.

What is at a path decides whether it may be written:
  * nothing, or a regular file: written (a regular file is replaced);
  * a symbolic link: the file it leads to is written in its place, so the link stays, as `cp` does;
  * anything else (a directory, a character or block device such as /dev/null, a FIFO, a socket):
    refused. A rename would replace the device node itself (run as root, `-o /dev/null` used to
    leave a regular file at /dev/null), and writing through to a device cannot be atomic.

**Replacing a file keeps what `cp` keeps**: its permission bits and owner (a 0600 file stays 0600),
and its hard links. A rename cannot keep either when the file has other hard links or belongs to a
user this process cannot give files to; such a file is rewritten in place from the finished
temporary file, as `cp` does — its inode, links, owner and mode stay, at the cost of atomicity.

**Directories.** atomic_directory fills a temporary directory and renames it into place whole: a training
checkpoint's generation (training/run_folder.py). A set may also hold a scratch directory (Part.scratch: a
linker's objects), never committed, removed with the set.

**A full disk** is one message whatever limit was met (ENOSPC, EDQUOT, or EFBIG under `ulimit -f`), and a
library's own exception that carries the OS's words counts too (describe, full_disk).

**Temporary files** are named `.NAME.pseudoformer-TOKEN.tmp` (a suffix may follow, as `.so` for
TVM). Each writer holds an exclusive lock (flock) on its own `.pseudoformer-TOKEN.lock` in the same
directory for as long as it lives; the kernel releases it when the writer dies, however it dies, in
whatever PID namespace it runs. Before writing, the directory is swept: a TOKEN whose lock can be
taken belongs to a writer that is provably gone, and its files are removed (so is a lock file left under its
first name, `.pseudoformer-TOKEN.locking`, by a writer killed before it locked it, once it is a minute old
and can be locked). A temporary file whose
lock is held, or that has no lock file at all, is never touched. SIGTERM and SIGINT remove a
writer's own files before the process ends (_LiveFiles).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pseudoformer.base.errors import UsageError
from pseudoformer.base.regular_file import kind_of

TAG = "pseudoformer"
_LOCK = re.compile(rf"\.{TAG}-([A-Za-z0-9_]+)\.lock")
_TEMP = re.compile(rf"\..+\.{TAG}-([A-Za-z0-9_]+)\.tmp[^/]*")
_LOCKING = re.compile(rf"\.{TAG}-[A-Za-z0-9_]+\.locking")
# A lock file is unlocked under its .locking name for the moment between its creation and its flock; one that is
# older than this and can be locked belongs to a writer killed in that moment.
_LOCKING_GRACE_S = 60.0


class OutputError(UsageError):
    """An output path that cannot be written: a missing directory, a device, no permission, a full disk."""


# A write that ran out of room, whichever limit it met: the disk (ENOSPC), the user's quota (EDQUOT), or the
# process's file-size limit (EFBIG, `ulimit -f`, whose SIGXFSZ an application may ignore). The user's remedy is
# the same, so the message is too.
_FULL = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}


def describe(e: BaseException) -> str:
    """What went wrong with a write, in the words a user acts on: every kind of full disk as one."""
    if isinstance(e, OSError) and e.errno in _FULL:
        return "no space left on device"
    return (getattr(e, "strerror", None) or str(e)) if isinstance(e, OSError) else str(e)


def full_disk(e: BaseException) -> bool:
    """Whether an error from a library that writes (its own exception, with the OS's words in it) is a full disk."""
    if isinstance(e, OSError):
        return e.errno in _FULL
    text = str(e)
    return any(os.strerror(n) in text or f"os error {n})" in text for n in _FULL)


@dataclass(frozen=True)
class Part:
    """One file of a set: where it goes, given the set's resolved main target, and its temporary's suffix."""

    name: str
    place: Callable[[Path], Path]
    suffix: str = ""
    mode: int = 0o777  # the widest permission bits the file may get (a copy's: its source's, file_access.FileCopy)
    scratch: bool = False  # a working directory (a linker's objects), never committed, removed with the set


MAIN = Part("main", lambda target: target)


def write_atomic(path: str | os.PathLike, write: Callable[[IO[bytes]], Any]) -> Path:
    """Call `write` on a binary file object whose content becomes `path`, atomically; return the path written."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        write(fh)
    return Path(path)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, suffix: str = "", mode: int = 0o777) -> Iterator[Path]:
    """A temporary path to write in full (for libraries that write by name); on a clean exit it is
    synced and renamed to `path` (with permission bits no wider than `mode`), on any exception removed."""
    with atomic_set(path, [Part("main", MAIN.place, suffix, mode)]) as tmps:
        yield tmps["main"]


@contextlib.contextmanager
def atomic_set(path: str | os.PathLike, parts: Sequence[Part]) -> Iterator[dict[str, Path]]:
    """Temporary paths for each part of a set of files (by part name), committed in the order of `parts`
    on a clean exit (put the part that names the others last), all removed on any exception."""
    target = _target(Path(path))
    targets = {p.name: _target(p.place(target)) for p in parts}
    if any(t.parent != target.parent for t in targets.values()):
        raise OutputError(f"cannot write {path}: the files of one model must share a directory")
    _sweep(target.parent)
    with _Writer(target.parent, path) as writer:
        tmps = {p.name: writer.temporary(targets[p.name], p.suffix, directory=p.scratch) for p in parts}
        kept = [p for p in parts if not p.scratch]
        try:
            yield tmps
            for p in kept:
                _fsync(tmps[p.name])
            for p in kept:
                _commit(tmps[p.name], _target(p.place(target)), p.mode)  # again: the path may have changed meanwhile
        except OSError as e:
            raise OutputError(f"cannot write {path}: {describe(e)}") from None
        except Exception as e:
            if full_disk(e):  # a library's own error around the OS's (safetensors', onnx's, TVM's)
                raise OutputError(f"cannot write {path}: no space left on device") from None
            raise


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary directory beside `path` to fill; on a clean exit its files are synced and it is renamed to
    `path` (which must not exist: a new generation of files, training/run_folder.py), on any exception removed,
    as it is if the writer dies (the sweep) or is ended by SIGTERM or SIGINT."""
    target = Path(path)
    _sweep(target.parent)
    with _Writer(target.parent, path) as writer:
        tmp = writer.temporary(target, "", directory=True)
        try:
            yield tmp
            _fsync_tree(tmp)
            os.rename(tmp, target)
            sync_directory(target.parent)
        except OSError as e:
            raise OutputError(f"cannot write {path}: {describe(e)}") from None
        except Exception as e:
            if full_disk(e):
                raise OutputError(f"cannot write {path}: no space left on device") from None
            raise


def check_output(path: str | os.PathLike) -> Path:
    """Refuse, before any work, a path atomic_path would refuse (no directory, a device at the path);
    return the file that would be replaced (the path, or where its link leads)."""
    return _target(Path(path))


def _target(path: Path) -> Path:
    """The file to replace for `path`: itself, or where its symbolic link leads; refused if not regular."""
    try:
        target = Path(os.path.realpath(path)) if path.is_symlink() else path
        if not target.parent.is_dir():
            raise OutputError(f"cannot write {path}: no directory {target.parent}")
        st = os.stat(target)
    except FileNotFoundError:
        return target
    except (OSError, ValueError) as e:  # a name too long, a NUL byte, a loop of links
        raise OutputError(f"cannot write {path}: {describe(e)}") from None
    if not stat.S_ISREG(st.st_mode):
        via = f" (a link to {target})" if target != path else ""
        raise OutputError(f"cannot write {path}{via}: it is {kind_of(st)}, and pseudoformer replaces only "
                          "regular files; give the path of a file to write")
    return target


class _Writer:
    """One writer's lock and temporary files in one directory; everything is removed on the way out."""

    def __init__(self, directory: Path, shown: str | os.PathLike) -> None:
        self.directory, self.shown = directory, shown
        self.files: list[Path] = []

    def __enter__(self) -> _Writer:
        # The lock file is made under a name the sweep ignores, locked, and only then renamed to its
        # sweepable name: no sweep can ever see it unlocked while this writer lives.
        try:
            fd, name = tempfile.mkstemp(dir=self.directory, prefix=f".{TAG}-", suffix=".locking")
        except OSError as e:
            raise OutputError(f"cannot write {self.shown}: {describe(e)}") from None
        self.fd = fd
        self.token = Path(name).name[len(TAG) + 2:-len(".locking")]
        self.lock = self.directory / f".{TAG}-{self.token}.lock"
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.replace(name, self.lock)
        except OSError as e:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(name)
            raise OutputError(f"cannot write {self.shown}: {describe(e)}") from None
        _live.add(self.lock)
        return self

    def temporary(self, target: Path, suffix: str, *, directory: bool = False) -> Path:
        tmp = self.directory / f".{target.name}.{TAG}-{self.token}.tmp{suffix}"
        try:
            if directory:
                tmp.mkdir(0o777)  # the umask applies
            else:
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))
        except OSError as e:
            raise OutputError(f"cannot write {self.shown}: {describe(e)}") from None
        self.files.append(tmp)
        _live.add(tmp)
        return tmp

    def __exit__(self, *exc: object) -> None:
        for p in [*self.files, self.lock]:
            _remove(p)
            _live.discard(p)
        os.close(self.fd)


def _remove(path: Path) -> None:
    """Remove a temporary file, or a temporary directory with what it holds; nothing if it is gone."""
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()


def _commit(tmp: Path, target: Path, widest: int = 0o777) -> None:
    """Put `tmp` in `target`'s place, keeping what cp keeps of a file it replaces (mode, owner, hard links), its
    permission bits no wider than `widest`."""
    mine = os.stat(tmp)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        # A new file gets the mode a new file gets (0666 less the umask), as cp gives it, even where the
        # library that wrote the temporary made it private (safetensors writes 0600); execute bits a
        # linker set are kept.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, (stat.S_IMODE(mine.st_mode) | 0o666) & ~umask & 0o777 & widest)
        os.replace(tmp, target)
        return
    in_place = st.st_nlink > 1
    if not in_place:
        os.chmod(tmp, stat.S_IMODE(st.st_mode) & 0o777 & widest)
        if (st.st_uid, st.st_gid) != (mine.st_uid, mine.st_gid):
            try:
                os.chown(tmp, st.st_uid, st.st_gid)
            except PermissionError:  # another user's file, writable by us: cp writes into it
                in_place = True
    if not in_place:
        os.replace(tmp, target)
        return
    # O_NOFOLLOW: the file checked, not a link someone put at its name since.
    fd = os.open(target, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    with open(tmp, "rb") as src, os.fdopen(fd, "r+b") as dst:
        dst.truncate(0)
        shutil.copyfileobj(src, dst, 1 << 20)
        dst.flush()
        os.fsync(dst.fileno())
    tmp.unlink()


def _sweep(directory: Path) -> None:
    """Remove the temporary files of writers that are provably gone: those whose lock can be taken."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    temps: dict[str, list[str]] = {}
    for name in names:
        if m := _TEMP.fullmatch(name):
            temps.setdefault(m.group(1), []).append(name)
    for name in names:
        m = _LOCK.fullmatch(name)
        locking = m is None and _LOCKING.fullmatch(name) is not None
        if m is None and not locking:
            continue
        try:
            fd = os.open(directory / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or (locking and time.time() - st.st_mtime < _LOCKING_GRACE_S):
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # held: its writer lives (in this PID namespace or another)
            for dead in [*(temps.get(m.group(1), []) if m is not None else []), name]:
                with contextlib.suppress(OSError):
                    _remove(directory / dead)
        finally:
            os.close(fd)


def leftover_pattern() -> re.Pattern[str]:
    """The names of temporary files (group 1: the writer's token)."""
    return _TEMP


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def sync_directory(path: Path) -> None:
    """Make the names in a directory (a rename into it, a link) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """Every file and directory under `root` on disk, before the rename that makes them visible."""
    for folder, _, files in os.walk(root):
        for name in files:
            if not os.path.islink(os.path.join(folder, name)):
                _fsync(Path(folder, name))
        sync_directory(Path(folder))


class _LiveFiles:
    """The temporary files being written, removed if SIGTERM or SIGINT ends the process.

    Python turns SIGINT into KeyboardInterrupt, and atomic_set removes its files on the way out. A
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
                _remove(p)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


_live = _LiveFiles()


def remove_on_signal(path: Path) -> None:
    """Remove `path` (a temporary file or directory of this process) if SIGTERM or SIGINT ends it."""
    _live.add(path)


def keep_on_signal(path: Path) -> None:
    """Undo remove_on_signal (the path has been removed or moved into place)."""
    _live.discard(path)
