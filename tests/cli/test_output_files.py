"""Output files: written atomically, never over a device, and no temporary file outlives its run.

The character-device case uses a device node made in tmp_path (the null device's numbers), never
/dev/null itself: a regression would replace the node in tmp_path, not the machine's /dev/null.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pseudoformer.base.atomic_write import (
    OutputError,
    atomic_path,
    check_output,
    leftover_pattern,
    write_atomic,
)


def _device(tmp_path: Path) -> Path | None:
    """A character device in tmp_path with /dev/null's numbers, or None where this user may not make one."""
    node = tmp_path / "null"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.stat(os.devnull).st_rdev)
    except PermissionError:
        return None
    return node


def test_a_character_device_is_never_replaced(tmp_path: Path) -> None:
    node = _device(tmp_path)
    if node is None:  # not root: check the refusal itself, which comes before anything is written
        with pytest.raises(OutputError, match="character device"):
            check_output(os.devnull)
        return
    for write in (lambda p: write_atomic(p, lambda f: f.write(b"x")), check_output):
        with pytest.raises(OutputError, match="it is a character device, and pseudoformer replaces only regular"):
            write(node)
        assert stat.S_ISCHR(node.stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]


def test_a_link_is_written_through_and_kept(tmp_path: Path) -> None:
    (tmp_path / "real.txt").write_bytes(b"old")
    link = tmp_path / "link.txt"
    link.symlink_to("real.txt")
    write_atomic(link, lambda f: f.write(b"new"))
    assert link.is_symlink() and (tmp_path / "real.txt").read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "real.txt"]


def test_a_failed_write_keeps_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")

    def fail(f: object) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OutputError, match="no space left on device"):
        write_atomic(target, fail)
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_temporary_files_are_named_so_they_can_be_found(tmp_path: Path) -> None:
    target = tmp_path / "m.onnx"
    with atomic_path(target) as tmp:
        m = leftover_pattern().fullmatch(tmp.name)
        assert tmp.parent == tmp_path and m and tmp.name.startswith(".m.onnx.pseudoformer-")
        assert (tmp_path / f".pseudoformer-{m.group(1)}.lock").is_file()  # the writer's lock, held while it lives
        tmp.write_bytes(b"x")
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


_HOLD_LOCK = textwrap.dedent("""
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("locked", flush=True)
    time.sleep(120)
""")


def test_leftovers_are_removed_only_when_their_writer_is_provably_gone(tmp_path: Path) -> None:
    # A dead writer: its lock file is there, and no one holds the lock. A live one: another process
    # (as a writer in another PID namespace would be, whose PID means nothing here) holds its lock.
    # An old-style leftover with no lock file cannot be proven dead, and is left alone.
    target = tmp_path / "y.npz"
    names = {"dead": ".y.npz.pseudoformer-dead01.tmp", "dead other": ".z.npz.pseudoformer-dead01.tmp",
             "live": ".y.npz.pseudoformer-live01.tmp", "no lock": ".y.npz.pseudoformer-1-abc123.tmp"}
    for name in [*names.values(), ".pseudoformer-dead01.lock", ".pseudoformer-live01.lock"]:
        (tmp_path / name).write_bytes(b"partial")
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(tmp_path / ".pseudoformer-live01.lock")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        write_atomic(target, lambda f: f.write(b"done"))
    finally:
        holder.kill()
        holder.wait()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [names["live"], names["no lock"], ".pseudoformer-live01.lock", "y.npz"])


_SLOW_WRITER = textwrap.dedent("""
    import sys, time
    from pseudoformer.base.atomic_write import write_atomic
    def write(f):
        f.write(b"x" * 4096)
        f.flush()
        print("writing", flush=True)
        time.sleep(60)
    write_atomic(sys.argv[1], write)
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_a_write_removes_the_temporary_file(sig: signal.Signals, tmp_path: Path) -> None:
    target = tmp_path / "model.onnx"
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_WRITER, str(target)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
        assert len(list(tmp_path.iterdir())) == 2  # the temporary file, being written, and its writer's lock
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == -sig
    assert list(tmp_path.iterdir()) == []
