"""Where a process's memory goes, phase by phase: the peak resident set (VmHWM) within each phase and the
resident set (VmRSS) at its end, the peak reset at every boundary (/proc/self/clear_refs, Linux). A phase is
a function call wrapped with `Phases.wrap`; what runs between two wrapped calls is its own row ("after X")."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _status(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS


class Phases:
    """Rows of (phase, peak MiB within it, MiB resident at its end, seconds in it); repeated calls of one
    phase are one row (the highest peak, the last end, the seconds summed)."""

    def __init__(self) -> None:
        self.rows: dict[str, list[float]] = {}
        self.current = "start"
        self.since = time.perf_counter()
        _reset_peak()

    def boundary(self, next_phase: str) -> None:
        peak, now, t = _status("VmHWM"), _status("VmRSS"), time.perf_counter()
        row = self.rows.setdefault(self.current, [0.0, 0.0, 0.0])
        row[0], row[1], row[2] = max(row[0], peak), now, row[2] + t - self.since
        self.current, self.since = next_phase, t
        _reset_peak()

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        """owner.attr (a function or method) recorded as the phase `name`."""
        inner: Callable[..., Any] = getattr(owner, attr)

        @functools.wraps(inner)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.boundary(name)
            try:
                return inner(*args, **kwargs)
            finally:
                self.boundary(f"after {name}")

        setattr(owner, attr, recorded)

    def table(self) -> str:
        self.boundary("end")
        out = ["| phase | peak MiB | resident at its end MiB | s |", "|---|---|---|---|"]
        out += [f"| {k} | {p:,.0f} | {e:,.0f} | {s:.1f} |" for k, (p, e, s) in self.rows.items()]
        return "\n".join(out)
