"""What the viewers show, extracted from a graph: snapshots, groups and source files.

`view_data` runs the passes of a level and keeps the graph after each (see snapshots.py);
`payload` turns that into the compact JSON the HTML viewer reads: one table of entries shared by
every snapshot, each snapshot a run-length-coded list of entry numbers, so fourteen snapshots of
GPT-2 cost little more than one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pseudoformer.base.errors import UsageError
from pseudoformer.ir import Graph
from pseudoformer.ir.printer import graph_name
from pseudoformer.ir.scopes import assign_groups
from pseudoformer.viewer.groups import group_table
from pseudoformer.viewer.snapshots import EntryTable, Snapshot, build_snapshots, collapse_fixed_points

if TYPE_CHECKING:
    from pseudoformer.backends.options import CompileOptions

O0_DOC = "the literal lowering of the paper's pseudocode"


@dataclass
class ViewData:
    name: str
    source: str
    level: int
    table: EntryTable
    snapshots: list[Snapshot]
    groups: list[dict[int, str]]  # per snapshot: live entry → its group key
    initial: int  # the snapshot shown first
    sources: dict[str, list[str]]  # file (as spans name it) → its lines

    def live_entries(self, k: int) -> list[int]:
        return [e for e in self.snapshots[k].entries if self.table.entries[e].live]


def view_data(graph: Graph, level: int = 0, *, after: str | None = None, trace_level: int | None = None,
              compile_options: CompileOptions | None = None, weights: Mapping[str, Any] | None = None) -> ViewData:
    """The graph at -O0 and after each pass of `trace_level` (default: `level`, or 2 at -O0, so
    that there are passes to step through), or of the ONNX compile's whole pipeline at that level with
    `compile_options` (its backend passes too: the contrib ops' fusions); the view opens on -O`level`,
    or after pass `after`."""
    from pseudoformer.optimize import trace

    traced = trace_level if trace_level is not None else (level or 2)
    steps = [("-O0", O0_DOC, graph)]
    steps += collapse_fixed_points([(p.name, p.doc, g) for p, g in
        trace(graph, traced, compile_options=compile_options, weights=weights)])
    table, snaps = build_snapshots(steps)
    initial = 0 if level == 0 else len(snaps) - 1
    if after is not None:
        hits = [k for k, s in enumerate(snaps) if s.label == after]
        if not hits:
            names = ", ".join(dict.fromkeys(s.label for s in snaps[1:]))
            raise UsageError(f"no pass {after!r} at -O{traced}; its passes are {names}")
        initial = hits[-1]
    return _finish(graph, level, table, snaps, initial)


def single_view(graph: Graph, label: str = "") -> ViewData:
    """One graph, no passes: what the SVG draws."""
    table, snaps = build_snapshots([(label, "", graph)])
    return _finish(graph, 0, table, snaps, 0)


def _finish(graph: Graph, level: int, table: EntryTable, snaps: list[Snapshot], initial: int) -> ViewData:
    groups = []
    for s in snaps:
        live = [e for e in s.entries if table.entries[e].live]
        at = {table.entries[e].stable: e for e in s.entries}
        src = {e: [at[x] for x in table.entries[e].src] for e in live}
        groups.append(assign_groups(live, {e: table.entries[e].scope for e in live}, src))
    files = sorted({e.span.file for e in table.entries if e.live and e.span is not None})
    source = str(graph.meta.get("source", files[0] if files else ""))
    return ViewData(graph_name(graph), source, level, table, snaps, groups, initial, _read_sources(files))


def _read_sources(files: list[str]) -> dict[str, list[str]]:
    """The .alg files the nodes' spans name: files the frontend read to make them, nothing else."""
    out = {}
    for f in files:
        try:
            out[f] = Path(f).read_text(encoding="utf-8-sig").splitlines()
        except (OSError, UnicodeDecodeError):
            out[f] = []  # moved or changed since: the viewer says the source is unavailable
    return out


def payload(vd: ViewData) -> dict[str, Any]:
    files = list(vd.sources)
    file_index = {f: i for i, f in enumerate(files)}
    all_keys = [k for per in vd.groups for k in per.values()]
    groups = group_table(all_keys)
    gindex = {k: i for i, k in enumerate(groups)}
    default: dict[int, int] = {}
    for per in vd.groups:
        for e, key in per.items():
            default.setdefault(e, gindex.get(key, -1))
    entries = []
    for i, e in enumerate(vd.table.entries):
        span = [file_index[e.span.file], e.span.line, e.span.col] if e.span is not None and e.live else 0
        entries.append([e.stable, e.op, e.type, list(e.src), e.attrs, span, e.name, int(e.live), default.get(i, -1)])
    snapshots = []
    for s, per in zip(vd.snapshots, vd.groups, strict=True):
        moved = {e: gindex.get(k, -1) for e, k in per.items() if gindex.get(k, -1) != default.get(e, -1)}
        snapshots.append({
            "label": s.label, "doc": s.doc, "entries": runs(s.entries), "outputs": s.outputs,
            "new": runs(sorted(s.new)), "rewired": runs(sorted(s.rewired)), "removed": runs(sorted(s.removed)),
            "group": {str(e): g for e, g in moved.items()},
        })
    return {
        "version": 1, "name": vd.name, "source": vd.source, "level": vd.level, "initial": vd.initial,
        "files": [[f, vd.sources[f]] for f in files],
        "groups": [[g.key, g.label, gindex[g.parent] if g.parent else -1, g.depth] for g in groups.values()],
        "entries": entries, "snapshots": snapshots,
    }


def runs(xs: list[int]) -> list[int]:
    """[start, length, start, length, …] of the runs of consecutive numbers in xs, in order."""
    out: list[int] = []
    for x in xs:
        if out and out[-2] + out[-1] == x:
            out[-1] += 1
        else:
            out += [x, 1]
    return out
