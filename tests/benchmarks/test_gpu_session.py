"""benchmarks/gpu_session.py, the one command a GPU session runs: what of it the CPU can check.

Its arguments (the plan it prints, the refusals), that its list of CUDA test files is every file with a CUDA test,
what it writes on a --smoke run (the six files, flat, under the device tool's limits; the tests counted from their
JUnit XML; gpu.py's forward rows), and that a step past its limit is stopped and said to be. Nothing is timed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_session.py"
ONE_CUDA_FILE = "tests/backends/test_onnx_cuda.py"  # one CUDA test, skipped here at once (torch never imported)


def _session(*argv: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    return subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=ROOT)


def _module():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_session

    return gpu_session


def test_the_plan_names_both_commands_and_their_limits(tmp_path: Path) -> None:
    done = _session("--dry-run", "--smoke", "--out", str(tmp_path), "--budget-s", "400", "--tests-s", "100")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("cuda tests (at most 100 s") and "-m pytest -m cuda" in lines[0]
    assert all(f in lines[0] for f in _module().CUDA_TESTS)
    assert lines[1].startswith("benchmarks/gpu.py (at most 300 s") and "--smoke" in lines[1]
    assert "--sections decode,forward,train" in lines[1]
    assert list(tmp_path.iterdir()) == []  # a plan writes nothing


@pytest.mark.parametrize(("argv", "said"), [
    ([], "no --out and no $OUT"),
    (["--out", "X", "--sections", "forward,decoding"], "--sections: no section decoding"),
    (["--out", "X", "--budget-s", "inf"], "--budget-s must be a finite number"),
])
def test_arguments_are_refused_in_one_line(argv: list[str], said: str) -> None:
    done = _session(*argv)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr


def test_without_a_gpu_the_full_run_refuses(tmp_path: Path) -> None:
    if _module().gpu_here() is None:
        pytest.skip("this machine has a GPU")
    done = _session("--out", str(tmp_path / "out"))
    assert done.returncode == 1 and ("no nvidia-smi here" in done.stderr or "finds no GPU" in done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_every_file_with_a_cuda_test_is_run() -> None:
    marked = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")
                    if p != Path(__file__) and re.search(r"mark\.cuda\b|CUDA_MARKS|^@cuda$", p.read_text(), re.M))
    assert marked == sorted(_module().CUDA_TESTS)


def _files(out: Path) -> dict[str, str]:
    files = {p.name: p.read_text() for p in out.iterdir()}
    # the device tool brings back at most 8 files, named in letters, digits, '.', '_' and '-'
    assert len(files) <= 8 and all(re.fullmatch(r"[A-Za-z0-9._-]+", n) for n in files) and \
        all(p.is_file() for p in out.iterdir())
    return files


def test_a_smoke_run_writes_the_six_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _session("--smoke", "--out", str(out), "--tests", ONE_CUDA_FILE, "--sections", "forward", timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    files = _files(out)
    assert sorted(files) == sorted(_module().FILES)
    assert "gpu none (no nvidia-smi)" in files["env.txt"] and "onnxruntime" in files["env.txt"]
    assert "SKIPPED" in files["cuda-tests.txt"] and "no CUDAExecutionProvider" in files["cuda-tests.txt"]
    summary = files["summary.md"]
    assert "| cuda tests | ok |" in summary and "| benchmarks/gpu.py | ok |" in summary
    assert "CUDA tests: 1 tests: 0 passed, 0 failed, 0 errors, 1 skipped." in summary
    assert summary.count("| forward | GPT-2 small") == 8 and files["gpu.md"].strip() in summary  # 4 and their graphs
    assert "forward:" in files["gpu.log"]  # gpu.py's section time
    assert summary in done.stdout


def test_a_step_past_its_limit_is_stopped_and_the_next_not_started(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _session("--smoke", "--out", str(out), "--tests", ONE_CUDA_FILE, "--tests-s", "0.01", "--budget-s", "20")
    assert done.returncode == 1
    files = _files(out)
    summary = files["summary.md"]
    assert "| cuda tests | stopped at its limit of 0 s |" in summary
    assert re.search(r"\| benchmarks/gpu\.py \| not run: \d+ s of the budget were left after the tests \|", summary)
    assert "CUDA tests: no JUnit XML written." in summary and "gpu.py wrote no table" in summary


def test_tests_stopped_at_their_limit_still_report_what_ran(tmp_path: Path) -> None:
    """A step past its limit is interrupted first: pytest writes the outcomes of the tests it ran."""
    tests = tmp_path / "test_slow.py"
    tests.write_text("import time\n\ndef test_quick():\n    pass\n\ndef test_slow():\n    time.sleep(120)\n")
    xml = tmp_path / "out.xml"
    step = _module().Step("tests", [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                                    f"--junitxml={xml}", "--rootdir", str(tmp_path), str(tests)],
                          20.0, tmp_path / "log.txt")
    step.run()
    assert step.note == "stopped at its limit of 20 s" and step.seconds < 60
    counts, failed = _module().test_counts(xml)
    assert "1 passed" in counts and not failed, counts
    assert "PASSED" in (tmp_path / "log.txt").read_text() and "test_quick" in (tmp_path / "log.txt").read_text()
