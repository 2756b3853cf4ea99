"""The suite's own prober: hostile values, files and outputs tried by kind on every command, the probes generated
from the command line's own parser, so that a flag added later is probed without anyone listing it.

Each probe runs the CLI in-process and is judged by the promise every refusal keeps (conftest.judge): a numeric
flag given NaN, ±∞ or a negative number, an input that is no regular file, an output that is an input or no
file at all, is refused with exit 1 (or argparse's 2) and one message; nothing ends in a traceback or an internal
error, and an input an output would have replaced is left as it was. The totals are printed at the end of the run
(`N probes, 0 broke`, conftest.pytest_terminal_summary)."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pseudoformer.base.errors import MAX_SHOWN
from pseudoformer.cli_parser import build_parser
from tests.hostile.conftest import GPT2, RAW_CONTROL, SMALL_GPT2, TINY_TRAIN, TRAIN_LOSS, Result

# Values no numeric option takes: each must be refused, whatever the option.
BAD_INT = ("-1",)
BAD_FLOAT = ("nan", "inf", "-inf", "-1")
# Values at the ends of what a type holds: taken, or refused with a message, never a crash (past int64, past
# float32, float64's largest and smallest).
EXTREME_INT = ("1" + "0" * 30, str(2**63))
EXTREME_FLOAT = ("1e308", "5e-324", "3.5e38")


@dataclass
class Probe:
    kind: str
    argv: list[str]
    untouched: list[Path] = field(default_factory=list)  # inputs that must be byte for byte as they were
    may_run: bool = False  # a value that may be taken (exit 0): then only a crash breaks the probe
    must_run: bool = False  # the control of its kind: a probe that must be taken (exit 0)

    def __str__(self) -> str:
        return f"[{self.kind}] pseudoformer {' '.join(self.argv)}"


@dataclass
class Tally:
    probes: int = 0
    broke: list[str] = field(default_factory=list)


TALLY = Tally()


def base_commands(d: Path) -> dict[str, list[str]]:
    """A small, valid invocation of each command; a probe appends to it (argparse takes a flag's last value)."""
    ids = d / "ids.npy"
    if not ids.exists():
        np.save(ids, np.tile(np.arange(20, dtype=np.int64), 20))
    return {
        "check": ["check", GPT2, *SMALL_GPT2],
        "inspect": ["inspect", GPT2, *SMALL_GPT2],
        "compile": ["compile", GPT2, *SMALL_GPT2, "-o", str(d / "m.onnx")],
        "run": ["run", GPT2, *SMALL_GPT2, "--input", "x=[[1, 2]]", "-o", str(d / "y.npz")],
        "generate": ["generate", GPT2, *SMALL_GPT2, "--prompt-ids", "1 2", "--max-new-tokens", "2"],
        "train": ["train", TRAIN_LOSS, *TINY_TRAIN, "--data", str(ids), "--seq-len", "8", "--steps", "1", "--lr", "1e-3",
                  "--batch-size", "2"],
    }


def numeric_flags() -> Iterator[tuple[str, str, type, int]]:
    """(command, flag, type, how many values it takes) of every int or float option of every subcommand."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command, sp in sub.choices.items():
        for action in sp._actions:
            if action.option_strings and action.type in (int, float):
                yield command, action.option_strings[-1], action.type, action.nargs if isinstance(action.nargs,
                                                                                                   int) else 1


def number_probes(d: Path, kind: str = "number") -> Iterator[Probe]:
    """Every numeric option given what none takes (kind "number": refused), or the ends of its type (kind "extreme
    number": taken or refused, never a crash)."""
    bases = base_commands(d)
    values = {"number": (BAD_INT, BAD_FLOAT), "extreme number": (EXTREME_INT, EXTREME_FLOAT)}[kind]
    for command, flag, kind_of, n in numeric_flags():
        if command in bases:
            for value in values[0] if kind_of is int else values[1]:
                yield Probe(kind, [*bases[command], *_given(flag, value, n)], may_run=kind != "number")


def extreme_probes(d: Path) -> Iterator[Probe]:
    return number_probes(d, "extreme number")


def _given(flag: str, value: str, n: int) -> list[str]:
    """A flag given `value` (`--flag=-inf`: argparse reads a lone -inf as a flag), n times for nargs=n."""
    return [f"{flag}={value}"] if n == 1 else [flag, *[value] * n]


def _not_regular(d: Path) -> dict[str, Path]:
    fifo = d / "fifo.npy"
    if not fifo.exists():
        os.mkfifo(fifo)
    (d / "adir.npy").mkdir(exist_ok=True)
    return {"a FIFO": fifo, "a directory": d / "adir.npy", "a device": Path("/dev/zero"),
            "a missing file": d / "missing.npy"}


def file_probes(d: Path) -> Iterator[Probe]:
    """Every option that reads a file, given something that is not a regular file."""
    bases = base_commands(d)
    reading = {"compile": ["--weights", "--config"], "run": ["--weights", "--config"],
               "generate": ["--weights", "--config", "--tokenizer"], "train": ["--weights", "--config", "--data",
                                                                              "--tokenizer"],
               "check": ["--config"], "inspect": ["--config"]}
    text = d / "text.txt"  # data a tokenizer reads (a .npy stream needs none)
    text.write_text("hello world " * 20)
    for name, path in _not_regular(d).items():
        for command, flags in reading.items():
            for flag in flags:
                extra = ["--data", str(text)] if (command, flag) == ("train", "--tokenizer") else []
                yield Probe(f"file: {flag} {name}", [*bases[command], *extra, flag, str(path)])
        yield Probe(f"file: --input {name}", [*bases["run"], "--input", f"x={path}"])


def output_probes(d: Path) -> Iterator[Probe]:
    """Every output given an input of the same command, or something that is no file."""
    bases = base_commands(d)
    alg = d / "copy.alg"
    if not alg.exists():
        alg.write_bytes(Path(GPT2).read_bytes())
    ids = d / "ids.npy"
    for command in ("compile", "run", "inspect", "train"):
        argv = [a if a != GPT2 else str(alg) for a in bases[command]]
        for what, out in (("the source", alg if command != "train" else Path(TRAIN_LOSS)), ("/dev/null", Path("/dev/null")),
                          ("a FIFO", _not_regular(d)["a FIFO"])):
            if command == "inspect":
                argv = [*argv, "--format", "json"]
            yield Probe(f"output: {command} -o {what}", [*argv, "-o", str(out)], [alg])
        if command == "train":
            yield Probe("output: train -o the data", [*argv, "-o", str(ids)], [ids])


# -D values no size takes (a size is a whole number ≥ 1 that fits the graph), and values a float
# hyperparameter (ε) may or may not take.
BAD_SIZES = ("2.5", "-3", "0", "nan", "inf", "1e300", "99999999999999999999", "0x10", "")


def define_probes(d: Path) -> Iterator[Probe]:
    """Every hyperparameter of a small GPT-2 given through -D what no size is (refused, naming it), and ε given
    the ends of float64 (taken or refused, never a crash)."""
    from tests.hostile.conftest import _GPT2

    bases = base_commands(d)
    for name, value in _GPT2.items():
        if isinstance(value, int):
            for bad in BAD_SIZES:
                yield Probe(f"define: -D {name}={bad}", [*bases["check"], "-D", f"{name}={bad}"])
        else:  # run: ε is used, not only declared
            for bad in ("-3", "0", "nan", "1e300", "5e-324", "1e-50"):
                yield Probe(f"define: -D {name}={bad}", [*bases["run"], "-D", f"{name}={bad}"], may_run=True)


def _odd_paths(d: Path) -> dict[str, str]:
    """Paths no file can be read from or written to as named: a name past NAME_MAX, a path through a file, an
    empty name, a name of control characters that does not exist, a /proc file that reports no size."""
    (d / "plain.txt").write_text("x")
    return {"a name of 300 letters": str(d / ("n" * 300 + ".npy")), "a path through a file": str(d / "plain.txt" / "x"),
            "an empty path": "", "a name with a newline and an escape": str(d / "a\nb\x1b[31m.npy"),
            "/proc/self/environ": "/proc/self/environ", "/proc/self/mem": "/proc/self/mem"}


def path_probes(d: Path) -> Iterator[Probe]:
    """Every option that reads a file, and every -o, given a path that cannot name one."""
    bases = base_commands(d)
    reading = {"compile": ["--weights", "--config"], "run": ["--weights", "--config"],
               "generate": ["--weights", "--config", "--tokenizer"], "train": ["--weights", "--config", "--data"],
               "check": ["--config"]}
    for name, path in _odd_paths(d).items():
        for command, flags in reading.items():
            for flag in flags:
                yield Probe(f"path: {flag} {name}", [*bases[command], flag, path])
        yield Probe(f"path: --input {name}", [*bases["run"], "--input", f"x={path}"])
        for command in ("compile", "run", "train"):
            if not path.startswith("/proc"):  # a name of control characters is a name a file may have
                yield Probe(f"path: {command} -o {name}", [*bases[command], "-o", path],
                            may_run="newline" in name)
    for command in ("compile", "run", "train"):
        yield Probe(f"path: {command} -o /dev/full", [*bases[command], "-o", "/dev/full"])


def judge_probe(probe: Probe, run: Callable[[list[str]], Result]) -> str | None:
    """Why the probe broke the promise, or None."""
    before = {p: p.read_bytes() for p in probe.untouched}
    r = run(probe.argv)
    if "Traceback" in r.err or "internal error" in r.err or "panicked" in r.err:
        return f"{probe}: a traceback or internal error: {r.err[-300:]}"
    if RAW_CONTROL.search(r.err + r.out):
        return f"{probe}: a raw control character on the terminal: {(r.err + r.out)[-300:]!r}"
    if probe.must_run and r.code != 0:
        return f"{probe}: the control probe of its kind was refused: {r.err[-300:]}"
    if r.code not in ((0, 1, 2) if probe.may_run or probe.must_run else (1, 2)):
        return f"{probe}: exit {r.code}, not a refusal"
    errors = [line for line in r.err.splitlines() if "error:" in line.split(" ", 2)[0:2][-1] or
              line.startswith("error:") or ": error:" in line]
    # One message; a compiler's located diagnostics (FILE:LINE:COL: error:), one per place, up to the cap it shows.
    located = all(re.match(r"\S+:\d+:\d+: error: ", line) for line in errors)
    if r.code == 1 and not (len(errors) == 1 or located and 1 < len(errors) <= MAX_SHOWN):
        return f"{probe}: {len(errors)} error lines: {r.err[-300:]}"
    changed = [str(p) for p, data in before.items() if p.read_bytes() != data]
    if changed:
        return f"{probe}: replaced an input: {', '.join(changed)}"
    return None
