"""A run's `-o` folder, whose checkpoint is switched whole: after a kill at any moment it holds the previous
complete checkpoint or the new one, never the model of one step beside the hf/ export of another.

A checkpoint is several files (model.safetensors, optimizer.safetensors, hf/, loss.csv, loss.svg, training.json),
and no file system renames several names at once. So each save writes a new *generation*, a directory of all of
them, and one rename of one symbolic link makes it current; the names a user reads are links through it:

    OUT/.checkpoint            -> .checkpoint-000120-k3j2a      (replaced by one rename per save)
    OUT/.checkpoint-000120-k3j2a/  model.safetensors  hf/  loss.csv  loss.svg  training.json  …
    OUT/model.safetensors      -> .checkpoint/model.safetensors (made once)
    OUT/hf                     -> .checkpoint/hf                …

A generation is written in a temporary directory (atomic_write.atomic_directory: removed if the writer fails or
dies, synced before it is renamed), the links are relative, so the folder can be moved or copied with them, and
the previous generation is removed once the switch is on disk. A folder written by an older pseudoformer (plain
files) is converted at its first save: its files become links after the switch.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

from pseudoformer.base.atomic_write import OutputError, atomic_directory, describe, sync_directory
from pseudoformer.base.regular_file import kind_of

CURRENT = ".checkpoint"
_GENERATION = CURRENT + "-"
_LEFT = re.compile(r"\..+\.(link|old)-[0-9a-f]{8}")  # a link or an old hf/ a killed save left half made


def current(folder: Path) -> Path:
    """Where a run folder's files are read from, resolved once (so that every file comes from one generation,
    even while another run saves): its current generation, or the folder itself when written before generations."""
    link = folder / CURRENT
    return Path(os.path.realpath(link)) if link.is_symlink() and link.is_dir() else folder


def link_names(folder: Path) -> list[Path]:
    """The names in `folder` that lead into its current generation (what a save will re-point)."""
    link = folder / CURRENT
    return [folder / n for n in os.listdir(link)] if link.is_symlink() and link.is_dir() else []


def check_folder(folder: Path, names: tuple[str, ...]) -> None:
    """Refuse, before a run, a folder whose checkpoint names a save could not take over: a name that is a device,
    a FIFO, a directory where a file goes (or anything but a directory at hf/). Our own links, and the plain files
    of a folder written before generations, are replaced."""
    link = folder / CURRENT
    if os.path.lexists(link) and not link.is_symlink():
        raise OutputError(f"cannot write -o {folder}: its {CURRENT} is {kind_of(link.lstat())}, where a run keeps the "
                          "link to its checkpoint; give a folder without it")
    for name in names:
        path = folder / name
        if not os.path.lexists(path) or _ours(folder, name):
            continue
        st = path.lstat()
        plain = path.is_dir() if name == "hf" else path.is_file() and not path.is_symlink()
        if not plain and not path.is_symlink():
            raise OutputError(f"cannot write -o {folder}: its {name} is {kind_of(st)}, which a checkpoint would replace; "
                              "give a folder without it")


@contextlib.contextmanager
def generation(folder: Path, step: int) -> Iterator[Path]:
    """A new directory to write a checkpoint's files into; on a clean exit it becomes `folder`'s checkpoint.

    A write that fails names the file as the user knows it (OUT/model.safetensors), not its temporary place."""
    name = f"{_GENERATION}{step:06d}-{secrets.token_hex(4)}"
    staged: Path | None = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_directory(folder / name) as tmp:
            staged = tmp
            yield tmp
    except OutputError as e:
        shown = str(e).replace(str(staged), str(folder)) if staged is not None else str(e)
        raise OutputError(shown.replace(str(folder / name), str(folder))) from None
    except OSError as e:  # the folder itself could not be made
        raise OutputError(f"cannot write -o {folder}: {describe(e)}") from None
    try:
        _switch(folder, name)
    except OSError as e:
        if os.path.realpath(folder / CURRENT) != os.path.realpath(folder / name):  # not switched: the old one stays
            shutil.rmtree(folder / name, ignore_errors=True)
        raise OutputError(f"cannot write -o {folder}: {describe(e)}") from None
    _remove_old(folder, name)


def _switch(folder: Path, name: str) -> None:
    """Make generation `name` current: links for its names first (dangling until the switch for a name the old
    generation lacks, so nothing new shows early), then one rename of the CURRENT link, then the old layout's
    plain files replaced by links."""
    entries = sorted(os.listdir(folder / name))
    plain = [n for n in entries if os.path.lexists(folder / n) and not _ours(folder, n)]
    for n in entries:
        if n not in plain and not os.path.lexists(folder / n):
            _link(folder / n, f"{CURRENT}/{n}")
    _link(folder / CURRENT, name)
    sync_directory(folder)
    for n in plain:  # a folder of plain files (before generations): each replaced by its link
        old = folder / n
        if old.is_dir() and not old.is_symlink():
            aside = folder / f".{n}.old-{secrets.token_hex(4)}"
            old.rename(aside)
            _link(old, f"{CURRENT}/{n}")
            shutil.rmtree(aside, ignore_errors=True)
        else:
            _link(old, f"{CURRENT}/{n}")
    for n in os.listdir(folder):  # a link into the checkpoint for a file the new generation lacks (SGD's optimizer)
        if _ours(folder, n) and n not in entries:
            (folder / n).unlink()
    sync_directory(folder)


def _link(path: Path, to: str) -> None:
    """Put a symbolic link to `to` at `path` by one rename, replacing what is there."""
    tmp = path.with_name(f".{path.name}.link-{secrets.token_hex(4)}")  # _LEFT
    os.symlink(to, tmp)
    try:
        os.replace(tmp, path)
    except OSError:
        tmp.unlink()
        raise


def _ours(folder: Path, name: str) -> bool:
    path = folder / name
    return path.is_symlink() and os.readlink(path) == f"{CURRENT}/{name}"


def _remove_old(folder: Path, keep: str) -> None:
    """The generations before `keep`, and what a killed save left: a generation renamed into place but never
    made current, a link not yet renamed, an old layout's hf/ moved aside."""
    for n in os.listdir(folder):
        path = folder / n
        if (n.startswith(_GENERATION) and n != keep) or _LEFT.fullmatch(n):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            elif _LEFT.fullmatch(n):
                with contextlib.suppress(OSError):
                    path.unlink()
