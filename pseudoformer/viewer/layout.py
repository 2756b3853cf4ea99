"""A nested layered layout for the static SVG: each group's contents in rows by dataflow rank.

The browser viewer lays out with dagre; a static picture has no browser, and a transformer's
graph is regular enough for a simpler scheme that reads well: inside a group, each item (a node
or a sub-group, laid out first) goes one row below the lowest item it reads, and rows are
packed into columns no taller than `MAX_HEIGHT`, so twelve layers stand side by side like
newspaper columns instead of in one tall strip. Edges leave a box at its bottom and enter one
at its top; one that would cross other boxes runs down a lane beside them, and one that goes
up to the next column runs up the gap between the columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ROW_GAP, COL_GAP, ITEM_GAP, PAD, TITLE = 8.0, 30.0, 12.0, 6.0, 15.0
MAX_HEIGHT = 960.0


@dataclass
class Box:
    """A leaf: a node, an input or output, or a collapsed group."""

    id: str
    w: float
    h: float
    x: float = 0.0  # top-left, absolute after `place`
    y: float = 0.0


@dataclass
class Cluster:
    """A group drawn as a frame around its items; the root cluster has no frame."""

    key: str
    items: list[Box | Cluster]
    framed: bool = True
    w: float = 0.0
    h: float = 0.0
    x: float = 0.0
    y: float = 0.0
    columns: list[tuple[float, float]] = field(default_factory=list)  # absolute x ranges after `place`
    _at: list[tuple[float, float]] = field(default_factory=list)  # items' offsets inside the frame


def measure(c: Cluster, edges: list[tuple[str, str]]) -> None:
    """Size `c` and its sub-clusters, bottom up; `edges` join leaf ids, and every cluster's items
    come in dataflow order."""
    for it in c.items:
        if isinstance(it, Cluster):
            measure(it, edges)
    item_of = _leaf_index(c)
    rank = [0] * len(c.items)
    for a, b in edges:
        i, j = item_of.get(a), item_of.get(b)
        if i is not None and j is not None and i < j:
            rank[j] = max(rank[j], rank[i] + 1)
    rows: dict[int, list[int]] = {}
    for i, r in enumerate(rank):
        rows.setdefault(r, []).append(i)
    columns: list[list[list[int]]] = [[]]
    height = 0.0
    heights = {r: max(c.items[i].h for i in rows[r]) for r in rows}
    for r in sorted(rows):
        h = heights[r]
        rest = sum(heights[q] + ROW_GAP for q in heights if q >= r)
        # Wrap to a new column, unless what is left fits in a tenth more: a column costs width.
        if columns[-1] and height + ROW_GAP + h > MAX_HEIGHT and height + rest > MAX_HEIGHT * 1.1:
            columns.append([])
            height = 0.0
        columns[-1].append(rows[r])
        height += h + (ROW_GAP if height else 0.0)
    c._at = [(0.0, 0.0)] * len(c.items)
    c.columns = []
    x = 0.0
    col_h = []
    for col in columns:
        width = max(sum(c.items[i].w for i in row) + ITEM_GAP * (len(row) - 1) for row in col)
        y = 0.0
        for row in col:
            rw = sum(c.items[i].w for i in row) + ITEM_GAP * (len(row) - 1)
            h = max(c.items[i].h for i in row)
            cx = x + (width - rw) / 2
            for i in row:
                c._at[i] = (cx, y + (h - c.items[i].h) / 2)
                cx += c.items[i].w + ITEM_GAP
            y += h + ROW_GAP
        c.columns.append((x, x + width))
        col_h.append(y - ROW_GAP)
        x += width + COL_GAP
    inner_w, inner_h = x - COL_GAP, max(col_h, default=0.0)
    frame = (PAD, PAD + TITLE) if c.framed else (0.0, 0.0)
    c.w = inner_w + 2 * frame[0]
    c.h = inner_h + frame[1] + frame[0]


def _leaf_index(c: Cluster) -> dict[str, int]:
    out: dict[str, int] = {}
    for i, it in enumerate(c.items):
        for leaf in leaves(it):
            out[leaf.id] = i
    return out


def leaves(it: Box | Cluster) -> list[Box]:
    if isinstance(it, Box):
        return [it]
    return [leaf for sub in it.items for leaf in leaves(sub)]


def place(c: Cluster, x: float = 0.0, y: float = 0.0) -> None:
    """Absolute positions, top down, once `measure` has sized everything."""
    c.x, c.y = x, y
    ox, oy = (x + PAD, y + PAD + TITLE) if c.framed else (x, y)
    c.columns = [(ox + a, ox + b) for a, b in c.columns]
    for it, (dx, dy) in zip(c.items, c._at, strict=True):
        if isinstance(it, Cluster):
            place(it, ox + dx, oy + dy)
        else:
            it.x, it.y = ox + dx, oy + dy


def route(a: Box, b: Box, boxes: list[Box], root: Cluster, lanes: dict[int, int]) -> str:
    """An SVG path from a's bottom to b's top, around the boxes between them."""
    x1, y1, x2, y2 = a.x + a.w / 2, a.y + a.h, b.x + b.w / 2, b.y
    if y2 > y1:
        between = [c for c in boxes if c is not a and c is not b and c.y < y2 and c.y + c.h > y1]
        lo, hi = min(x1, x2) - 4, max(x1, x2) + 4
        blocking = [c for c in between if c.x < hi and c.x + c.w > lo]
        if not blocking:
            my = (y1 + y2) / 2
            return f"M{x1:.1f},{y1:.1f} C{x1:.1f},{my:.1f} {x2:.1f},{my:.1f} {x2:.1f},{y2:.1f}"
        lane = max(c.x + c.w for c in blocking) + 8
        # The way over to the lane may cross boxes too: move right past them.
        while wider := [c for c in between if c.x < lane + 4 and c.x + c.w + 8 > lane and c.x > lo]:
            lane = max(c.x + c.w for c in wider) + 8
    else:
        lane = _gap_before(root, b, a) if _gap_before(root, b, a) is not None else max(x1, x2) + 40
    k = lanes.get(round(lane), 0)
    lanes[round(lane)] = k + 1
    lane += 5 * k
    return (f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + 14:.1f} {lane:.1f},{y1 + 4:.1f} {lane:.1f},{y1 + 18:.1f} "
            f"L{lane:.1f},{y2 - 18:.1f} C{lane:.1f},{y2 - 4:.1f} {x2:.1f},{y2 - 14:.1f} {x2:.1f},{y2:.1f}")


def _gap_before(c: Cluster, b: Box, a: Box) -> float | None:
    """The x of the gap left of b's column in the innermost cluster where a and b sit in
    different columns (an edge that wraps to the next column climbs there)."""
    for it in c.items:
        if isinstance(it, Cluster):
            ids = {leaf.id for leaf in leaves(it)}
            if a.id in ids and b.id in ids:
                return _gap_before(it, b, a)
    for left, right in c.columns:
        if left <= b.x + b.w / 2 <= right and not left <= a.x + a.w / 2 <= right:
            return left - COL_GAP / 2
    return None
