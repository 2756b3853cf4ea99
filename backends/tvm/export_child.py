"""A TVM library's export in a child process: LLVM ends the process that cannot finish writing an object (a full
disk), so the export runs where only a child ends, and what it said becomes one message here."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from pseudoformer.base.atomic_write import OutputError, full_disk
from pseudoformer.base.errors import BackendError


def export_in_child(executable: Any, so: Path, objects: Path, shown: Path) -> None:
    """TVM's export: the objects into `objects`, linked into `so` (TVM links by the name's suffix), in a child
    process. LLVM ends the process that writes an object it cannot finish (`LLVM ERROR: IO failure on output
    stream`, then exit(1): a full disk), before Python could remove a temporary file or say a word; in a child,
    only the child ends, and what it said becomes one line here: a full disk as every writer says it
    (atomic_set), anything else (no linker, a linker's complaint) as TVM's or LLVM's first line of it."""
    import signal

    sys.stdout.flush()
    sys.stderr.flush()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: export, and say what went wrong on the pipe
        code = 1
        try:
            os.close(read)
            os.dup2(write, 2)  # TVM's and LLVM's own lines too
            executable.export_library(str(so), workspace_dir=str(objects))
            code = 0
        except BaseException as e:  # noqa: BLE001 (whatever it is, the parent says it)
            os.write(2, f"\n{type(e).__name__}: {e}\n".encode(errors="replace"))
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read(1 << 20).decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    if status == 0:
        return
    died = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXFSZ  # past `ulimit -f`, not ignored
    if died or full_disk(RuntimeError(said)):
        raise OutputError(f"cannot write {shown}: no space left on device")
    lines = [line.strip() for line in said.splitlines() if line.strip() and "Scope" not in line]
    first = next((line for line in lines if "ERROR" in line or "Error" in line), lines[-1] if lines else "")
    raise BackendError(f"cannot write {shown}: TVM could not export the library: {first[:300] or status}")
