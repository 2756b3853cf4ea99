"""The graph at -O0 and after each pass, as snapshots over one table of distinct nodes.

Passes keep an untouched node as the same object and clone a node whose operand changed, so
object identity would mark everything downstream of a rewrite as new. Here each node has a
*stable id* that survives the passes: an unchanged node keeps its own, and a node a pass made
inherits the id of a node the pass removed with the same signature (op, attributes, type, scope,
span), preferring one that read the same operands. An *entry* is one version of a stable id: its
signature and the stable ids of its operands. A clone of a node whose operands were rewritten
deep upstream is the same entry, so it is not marked; a node whose operand was replaced is a new
entry under its old id, *rewired*; a node with a new id is *new*.

Each snapshot is its list of entries in `Graph.nodes()` order, so position k is the printer's
value number %k. Whether an entry depends on a graph input (`live`) is fixed when it is made: one
that does not is computed from parameters and constants alone, and is shown folded into the
nodes that read it, by `summary`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pseudoformer.ir import Graph, Node, Op
from pseudoformer.ir.printer import format_value
from pseudoformer.ir.types import Span

SUMMARY_CHARS = 48


@dataclass
class Entry:
    stable: int
    op: str
    type: str
    src: tuple[int, ...]  # stable ids of the operands
    attrs: dict[str, str]  # formatted by the printer's format_value
    span: Span | None
    scope: str
    name: str  # an input's or parameter's name; for a folded entry, its summary
    live: bool


@dataclass
class Snapshot:
    label: str  # "-O0" or the pass name
    doc: str
    entries: list[int]  # Graph.nodes() order: entries[k] is %k
    outputs: list[tuple[str, int]]
    new: set[int] = field(default_factory=set)
    rewired: set[int] = field(default_factory=set)
    removed: set[int] = field(default_factory=set)  # entries of the previous snapshot


class EntryTable:
    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self._by_key: dict[tuple, int] = {}
        self._stable: dict[int, int] = {}  # id(node) → stable id
        self._nodes: list[Node] = []  # keeps every node alive, so that the ids in _stable stay unique
        self._count = 0

    def add(self, graph: Graph, before: Snapshot | None) -> list[int]:
        """The entries of `graph`'s nodes, in Graph.nodes() order, matched against `before`'s."""
        nodes = graph.nodes()
        claimed = {self._stable[id(n)] for n in nodes if id(n) in self._stable}
        free: dict[tuple, list[Entry]] = {}  # what `before` had and `graph` lost, by signature
        for e in before.entries if before else ():
            entry = self.entries[e]
            if entry.stable not in claimed:
                free.setdefault(_sig(entry), []).append(entry)
        entry_of: dict[int, int] = {}  # stable id → entry, in this graph
        order = []
        for n in nodes:
            src = tuple(self._stable[id(s)] for s in n.src)
            if id(n) not in self._stable:
                self._stable[id(n)] = self._match(n, src, free)
                self._nodes.append(n)
            stable = self._stable[id(n)]
            key = (stable, *signature(n), src)
            if key not in self._by_key:
                self._by_key[key] = len(self.entries)
                self.entries.append(self._make(n, stable, [entry_of[s] for s in src]))
            entry_of[stable] = self._by_key[key]
            order.append(entry_of[stable])
        return order

    def _match(self, n: Node, src: tuple[int, ...], free: dict[tuple, list[Entry]]) -> int:
        """The stable id of a removed node that `n` replaces, or a new one."""
        options = free.get(signature(n), [])
        if options:
            best = max(options, key=lambda e: sum(a == b for a, b in zip(e.src, src, strict=False)))
            options.remove(best)
            return best.stable
        self._count += 1
        return self._count

    def _make(self, n: Node, stable: int, src: list[int]) -> Entry:
        attrs = {k: format_value(v) for k, v in sorted(n.attrs.items()) if k != "type"}
        # A dim reads a shape, not data: sizes and masks built from them fold like constants.
        live = n.op is Op.INPUT or (n.op is not Op.DIM and any(self.entries[s].live for s in src))
        name = str(n.attrs.get("name", ""))
        if not live and not name:
            name = self._summary(n, src, attrs)
        return Entry(stable, n.op.value, str(n.type), tuple(self.entries[s].stable for s in src), attrs, n.span,
                     n.scope, name, live)

    def _summary(self, n: Node, src: list[int], attrs: dict[str, str]) -> str:
        """A short expression for a constant subgraph: `transpose(W_p)`, `concat(W_q, W_k, …)`."""
        if n.op is Op.CONST:
            return _clip(attrs.get("value", "const"))
        inner = ", ".join(_short(self.entries[s]) for s in src[:3]) + (", …" if len(src) > 3 else "")
        if n.op is Op.DIM:
            inner += f", {attrs.get('axis', '?')}"
        return _clip(f"{n.op.value}({inner})")


def signature(n: Node) -> tuple:
    """What a node computes, apart from its operands: op, attributes, type, scope and span."""
    attrs = {k: format_value(v) for k, v in sorted(n.attrs.items()) if k != "type"}
    return (n.op.value, tuple(attrs.items()), str(n.type), n.scope, n.span)


def _sig(e: Entry) -> tuple:
    return (e.op, tuple(e.attrs.items()), e.type, e.scope, e.span)


def _short(e: Entry) -> str:
    """A parameter by the last part of its name (`W_q` for `layers.0.W.heads.3.W_q`)."""
    return e.name.rsplit(".", 1)[-1] if e.op == "param" else e.name


def _clip(s: str) -> str:
    return s if len(s) <= SUMMARY_CHARS else s[: SUMMARY_CHARS - 1] + "…"


def collapse_fixed_points(steps: list[tuple[str, str, Graph]]) -> list[tuple[str, str, Graph]]:
    """A fixed-point pass reports each round; consecutive rounds of one pass are one step here
    (no level runs one pass twice in a row)."""
    out: list[tuple[str, str, Graph]] = []
    for step in steps:
        if out and out[-1][0] == step[0]:
            out[-1] = step
        else:
            out.append(step)
    return out


def build_snapshots(steps: list[tuple[str, str, Graph]]) -> tuple[EntryTable, list[Snapshot]]:
    """`steps`: (label, doc, graph) for -O0 and then each pass, in order."""
    table = EntryTable()
    snaps: list[Snapshot] = []
    for label, doc, graph in steps:
        before = snaps[-1] if snaps else None
        order = table.add(graph, before)
        assert len(set(order)) == len(order)
        at = dict(zip((id(n) for n in graph.nodes()), order, strict=True))
        snap = Snapshot(label, doc, order, [(name, at[id(n)]) for name, n in graph.outputs])
        if before is not None:
            _mark_changes(table, before, snap)
        snaps.append(snap)
    return table, snaps


def _mark_changes(table: EntryTable, before: Snapshot, after: Snapshot) -> None:
    old, now = set(before.entries), set(after.entries)
    after.removed = old - now
    kept = {table.entries[e].stable for e in old}
    for e in now - old:
        (after.rewired if table.entries[e].stable in kept else after.new).add(e)
