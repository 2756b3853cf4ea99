"""What every probe of tests/hostile shares: running the CLI as a user would, and judging what it printed.

Each probe runs `pseudoformer.cli.main` in-process with file-descriptor capture (capfd), so what native
code writes straight to fd 2 — a Rust panic's backtrace, onnxruntime's log — is seen as a user would see
it. `judge` holds the promise every probe shares: exit 1, one `error:` line that starts a line, no
traceback, no internal error, no raw control character on the terminal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from pseudoformer.cli import main
from tests.training.tiny_train import LOSS, TINY, token_stream

MODELS = Path(__file__).resolve().parents[2] / "models"
GPT2, LLAMA = str(MODELS / "gpt2.alg"), str(MODELS / "llama.alg")
_GPT2 = {"L": 1, "H": 2, "d_e": 8, "d_mlp": 16, "d_attn": 4, "d_mid": 4, "ell_max": 6, "N_V": 11, "eps": 1e-5}
_LLAMA = {"L": 1, "H": 2, "H_kv": 1, "d_e": 8, "d_attn": 4, "d_mlp": 16, "N_V": 11, "eps": 1e-5, "b": 10000.0,
          "kappa": 1.0, "ell_0": 0.0, "alpha": 1.0, "beta": 4.0, "ell_gen": 2, "tau": 1.0}


def defines(sizes: dict[str, float]) -> list[str]:
    return ["--config", "/dev/null", *(a for k, v in sizes.items() for a in ("-D", f"{k}={v}"))]


SMALL_GPT2, SMALL_LLAMA = defines(_GPT2), defines(_LLAMA)
# `train`'s probes: the CLI tests' smallest run (tests/training/tiny_train.py)
TRAIN_LOSS, TINY_TRAIN = LOSS, TINY


@pytest.fixture
def ids(tmp_path: Path) -> Path:
    return token_stream(tmp_path)


# A raw control character or escape sequence on the terminal: anything in C0/C1 but \n and \t.
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_cli(argv: list[str], capfd: pytest.CaptureFixture[str]) -> Result:
    capfd.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:  # argparse's own refusals
        code = e.code if isinstance(e.code, int) else 1
    got = capfd.readouterr()
    return Result(code, got.out, got.err)


def judge(r: Result, fragment: str) -> None:
    """One clean refusal: exit 1, exactly one line that starts `error:` (or FILE:LINE:COL: error:), the
    fragment, no traceback or internal error, and nothing raw on the terminal."""
    assert r.code == 1, r.err
    assert "Traceback" not in r.err and "internal error" not in r.err and "panicked" not in r.err, r.err
    starts = [line for line in r.err.splitlines() if re.match(r"(\S+:\d+:\d+: )?error: ", line)]
    assert len(starts) == 1, r.err
    assert fragment in r.err, r.err
    assert not RAW_CONTROL.search(r.err + r.out), repr(r.err + r.out)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The prober's totals (tests/hostile/prober.py), when it ran: `N probes, 0 broke`."""
    from tests.hostile.prober import TALLY

    if TALLY.probes:
        terminalreporter.write_line(f"hostile prober: {TALLY.probes} probes, {len(TALLY.broke)} broke")
