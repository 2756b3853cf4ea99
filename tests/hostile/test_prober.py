"""Runs the prober (tests/hostile/prober.py) over every kind: numbers (refused, and at the ends of their types),
input files and outputs, odd paths, arrays of every dtype, unusual source text, configs and tokenizers of the
wrong shape, GGUF metadata at the ends of its types, on every command."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.hostile import prober, prober_contents
from tests.hostile.conftest import Result, run_cli

KINDS = {"number": prober.number_probes, "extreme": prober.extreme_probes, "define": prober.define_probes, "file": prober.file_probes,
         "output": prober.output_probes, "path": prober.path_probes, "data": prober_contents.data_probes,
         "source": prober_contents.source_probes, "config": prober_contents.config_probes, "config.json": prober_contents.hf_config_probes,
         "tokenizer": prober_contents.tokenizer_probes, "gguf": prober_contents.gguf_probes}
# A probe that runs longer than this has hung (a value taken that should have been refused): it is stopped, and
# the KeyboardInterrupt-like exception it ends with shows as the internal error that breaks it.
PROBE_SECONDS = 120


class ProbeTimeout(BaseException):
    pass


def _bounded(argv: list[str], capfd: pytest.CaptureFixture[str]) -> Result:
    def ring(signum: int, frame: Any) -> None:
        raise ProbeTimeout(f"still running after {PROBE_SECONDS} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(PROBE_SECONDS)
    try:
        return run_cli(argv, capfd)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("kind", list(KINDS))
def test_no_probe_breaks(kind: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    probes: Iterator[prober.Probe] = KINDS[kind](tmp_path)
    tried = list(probes)
    assert len(tried) >= 10  # the prober found what to try
    broke = [why for p in tried if (why := prober.judge_probe(p, lambda argv: _bounded(argv, capfd))) is not None]
    prober.TALLY.probes += len(tried)
    prober.TALLY.broke += broke
    assert not broke, f"{len(broke)} of {len(tried)} probes broke:\n" + "\n".join(broke)
