"""Optimisation levels for the API and the CLI: -O0 literal, -O1 cleanup, -O2 (default) everything."""

from __future__ import annotations

import difflib
import os

from pseudoformer.errors import Note, Pos, UsageError
from pseudoformer.ir import Graph
from pseudoformer.ir.printer import format_graph
from pseudoformer.passes.manager import LEVELS, PIPELINES, Pass, passes, pipeline, run_passes
from pseudoformer.passes.pass_base import PassContext

DEFAULT_LEVEL = 2


def check_level(level: int) -> None:
    if level not in LEVELS:
        raise UsageError(f"no optimisation level -O{level} (choose {', '.join(f'-O{k}' for k in LEVELS)})")


def optimize(graph: Graph, level: int = DEFAULT_LEVEL, *, debug: bool | None = None) -> Graph:
    """Run the level's passes; with debug (or PSEUDOFORMER_DEBUG=1) verify the IR after each one."""
    check_level(level)
    return run_passes(graph, pipeline(level), check=debugging() if debug is None else debug)


def debugging() -> bool:
    """Whether to verify the IR after every pass (PSEUDOFORMER_DEBUG=1)."""
    return bool(os.environ.get("PSEUDOFORMER_DEBUG"))


def refusals(graph: Graph, level: int = DEFAULT_LEVEL) -> list[Note]:
    """Why each fusion the level's passes matched was refused, once per place and reason, in source order.
    A head or norm written one way that did not fuse stays as written: correct, but slower."""
    check_level(level)
    ctx = PassContext()
    run_passes(graph, pipeline(level), ctx=ctx)
    seen: dict[tuple[str, str, str], Note] = {}
    for rule, why, span in ctx.refusals:
        pos = Pos(span.file, span.line, span.col) if span is not None else None
        seen.setdefault((rule, why, str(pos)), Note(f"{rule} refused: {why}", pos))
    return sorted(seen.values(), key=lambda n: (n.pos.file, n.pos.line, n.pos.col) if n.pos else ("", 0, 0))


def describe_passes() -> str:
    """The passes, the levels and pipelines each runs in, and the pipelines themselves."""
    lines = ["passes:"]
    for name, p in passes().items():
        used = [f"-O{k}" for k, names in LEVELS.items() if name in names]
        used += [k for k, names in PIPELINES.items() if name in names and not k.startswith("generation")]
        if any(name in names for k, names in PIPELINES.items() if k.startswith("generation")):
            used.append("generation")
        lines.append(f"  {name:20s} {' '.join(used) or '(not in a pipeline)':24s} {p.doc}")
    lines.append("pipelines (after the optimisation level):")
    for key, names in PIPELINES.items():
        lines.append(f"  {key:20s} {', '.join(names)}")
    return "\n".join(lines)


def trace(graph: Graph, level: int) -> list[tuple[Pass, Graph]]:
    """The graph after each pass application of the level's pipeline, in order."""
    check_level(level)
    out: list[tuple[Pass, Graph]] = []
    run_passes(graph, pipeline(level), check=True, after=lambda p, g, changed: out.append((p, g)))
    return out


def after_pass(graph: Graph, name: str, level: int) -> Graph:
    steps = trace(graph, max(level, 1) if name not in _names(level) else level)
    hits = [g for p, g in steps if p.name == name]
    if not hits:
        raise UsageError(f"no pass {name!r} at -O{level}; the passes are {', '.join(passes())}")
    return hits[-1]


def diff_pass(graph: Graph, name: str, level: int) -> str:
    steps = trace(graph, level)
    before = graph
    for p, g in steps:
        if p.name == name:
            a = format_graph(before, with_locations=False).splitlines(keepends=True)
            b = format_graph(g, with_locations=False).splitlines(keepends=True)
            return "".join(difflib.unified_diff(a, b, f"before {name}", f"after {name}")) or f"{name}: no change\n"
        before = g
    raise UsageError(f"no pass {name!r} at -O{level}; the passes are {', '.join(passes())}")


def _names(level: int) -> list[str]:
    return LEVELS.get(level, [])
