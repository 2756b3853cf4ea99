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

from pseudoformer.atomic_write import OutputError, atomic_path, check_output, leftover_pattern, write_atomic


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

    with pytest.raises(OutputError, match="No space left"):
        write_atomic(target, fail)
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_temporary_files_are_named_so_they_can_be_found(tmp_path: Path) -> None:
    target = tmp_path / "m.onnx"
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and leftover_pattern(target).fullmatch(tmp.name)
        assert tmp.name.startswith(f".m.onnx.pseudoformer-{os.getpid()}-")
        tmp.write_bytes(b"x")
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


def test_leftovers_of_killed_runs_are_removed_by_the_next_write(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a process id that no longer runs
    target = tmp_path / "y.npz"
    stale = tmp_path / f".y.npz.pseudoformer-{dead.pid}-abc123.tmp"
    live = tmp_path / f".y.npz.pseudoformer-{os.getppid()}-def456.tmp"  # a run still going: left alone
    other = tmp_path / f".z.npz.pseudoformer-{dead.pid}-abc123.tmp"  # another target's: not this write's business
    for p in (stale, live, other):
        p.write_bytes(b"partial")
    write_atomic(target, lambda f: f.write(b"done"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name, "y.npz"])


_SLOW_WRITER = textwrap.dedent("""
    import sys, time
    from pseudoformer.atomic_write import write_atomic
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
        assert len(list(tmp_path.iterdir())) == 1  # the temporary file, being written
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == -sig
    assert list(tmp_path.iterdir()) == []
