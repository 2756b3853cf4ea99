"""The manifest of a TVM library: what `run model.so` checks before it loads anything.

A `.so` is native code: loading it runs its constructors, with the rights of the user who runs
pseudoformer, before any of its functions is called. So the library is never loaded just to ask
whether pseudoformer wrote it. Our TVM backend writes, as the last file of the set
(atomic_write.atomic_set), `NAME.manifest.json` beside `NAME.so`: the format, the pseudoformer and
TVM versions, and the SHA-256 and size of the library and of its weights file. `run` reads the
manifest, refuses a library written by another TVM, hashes the library while copying it into a
private directory, and loads that copy only if the hash matches — so the bytes loaded are the bytes
checked, even if the file is replaced meanwhile.

What this proves is that the files belong together and were written by pseudoformer's TVM backend
as the manifest says; it cannot prove who wrote them. Whoever can write a `.so` can write a
manifest beside it: run only libraries you would run as programs (docs/security.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pseudoformer.base.atomic_write import describe
from pseudoformer.base.errors import UsageError
from pseudoformer.base.file_access import read_text, regular_file
from pseudoformer.base.model_files import manifest_path
from pseudoformer.base.regular_file import open_regular
from pseudoformer.version import __version__

FORMAT = 1


def _digest(fh: Any, copy: Any = None) -> tuple[str, int]:
    h, n = hashlib.sha256(), 0
    while chunk := fh.read(1 << 20):
        h.update(chunk)
        n += len(chunk)
        if copy is not None:
            copy.write(chunk)
    return h.hexdigest(), n


def write_manifest(path: Path, files: Mapping[str, Path], tvm_version: str, meta: Mapping[str, Any]) -> None:
    """Write the manifest of `files` (final name → the temporary file that holds its bytes) to `path`."""
    entries = {}
    for name, tmp in files.items():
        with open(tmp, "rb") as fh:
            sha, size = _digest(fh)
        entries[name] = {"sha256": sha, "bytes": size}
    doc = {"format": FORMAT, "producer": "pseudoformer", "pseudoformer": __version__, "tvm": tvm_version,
           "param_mode": meta.get("param_mode"), "files": entries}
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def read_manifest(library: Path, tvm_version: str) -> dict[str, Any]:
    mpath = manifest_path(library)
    try:
        regular_file(mpath, "manifest", 1 << 20)
    except UsageError:
        raise UsageError(f"{library} has no manifest {mpath.name} beside it, so nothing shows that pseudoformer "
                         "wrote it; pseudoformer loads no library it cannot check (loading runs the library's "
                         "native code)") from None
    try:
        doc = json.loads(read_text(mpath, "manifest", "config"), parse_constant=_refuse)
    except (json.JSONDecodeError, ValueError, RecursionError) as e:
        raise UsageError(f"{mpath} is not a manifest pseudoformer wrote ({e})") from None
    if not isinstance(doc, dict) or doc.get("producer") != "pseudoformer" or doc.get("format") != FORMAT \
            or not isinstance(doc.get("files"), dict):
        raise UsageError(f"{mpath} is not a manifest of this pseudoformer (format {FORMAT})")
    if doc.get("tvm") != tvm_version:
        raise UsageError(f"{library} was compiled with TVM {doc.get('tvm')!r}, and this is TVM {tvm_version}; "
                         "compile it again")
    return doc


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def check_file(library: Path, doc: Mapping[str, Any], name: str, path: Path, copy: Any = None) -> None:
    """Hash `path` (copying it to `copy` as it is read) and compare it with the manifest's entry `name`."""
    entry = doc["files"].get(name)
    if not isinstance(entry, dict):
        raise UsageError(f"the manifest of {library} does not list {name}")
    fd, _ = open_regular(path)
    assert fd is not None
    with os.fdopen(fd, "rb") as fh:
        sha, size = _digest(fh, copy)
    if sha != entry.get("sha256") or size != entry.get("bytes"):
        raise UsageError(f"{path} is not the file its manifest lists (SHA-256 {sha[:16]}…, {size:,} bytes; the "
                         f"manifest says {str(entry.get('sha256'))[:16]}…, {entry.get('bytes')} bytes): it changed "
                         "after pseudoformer wrote it, and is not loaded")


@contextlib.contextmanager
def verified_copy(library: Path, tvm_version: str) -> Iterator[tuple[Path, dict[str, Any]]]:
    """A private copy of `library` whose bytes match its manifest, and the manifest; nothing is loaded here."""
    library = Path(os.path.realpath(library))  # the set lives beside the file a link leads to
    regular_file(library, "compiled model")
    doc = read_manifest(library, tvm_version)
    private = Path(tempfile.mkdtemp(prefix="pseudoformer-verified-"))  # 0700: no one else can swap the copy
    try:
        copy = private / library.name
        try:
            with open(copy, "wb") as out:
                check_file(library, doc, library.name, library, out)
        except OSError as e:  # a full temporary disk: said as every writer says it
            raise UsageError(f"cannot write {copy}, the copy of {library} that is checked and loaded: "
                             f"{describe(e)} (set TMPDIR to a directory on a larger disk)") from None
        yield copy, doc
    finally:
        shutil.rmtree(private, ignore_errors=True)
