"""Runs the prober (tests/hostile/prober.py) over every kind: numbers, input files and outputs, on every command."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile.conftest import run_cli
from tests.hostile.prober import TALLY, file_probes, judge_probe, number_probes, output_probes


@pytest.mark.parametrize("kind", ["number", "file", "output"])
def test_no_probe_breaks(kind: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    probes = list({"number": number_probes, "file": file_probes, "output": output_probes}[kind](tmp_path))
    assert len(probes) >= 10  # the prober found what to try
    broke = [why for p in probes if (why := judge_probe(p, lambda argv: run_cli(argv, capfd))) is not None]
    TALLY.probes += len(probes)
    TALLY.broke += broke
    assert not broke, f"{len(broke)} of {len(probes)} probes broke:\n" + "\n".join(broke)
