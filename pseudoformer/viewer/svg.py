"""`--format svg`: a static picture of a graph, one cluster per algorithm-call group.

The boxes read as the HTML viewer's do (`%N op`, the parameters folded into the node, its
shape). Groups are all open when the graph is small enough to read on one screen; a larger graph
keeps its deeper groups closed, each a box with its number of ops. The SVG is built with
ElementTree, so names from the source are escaped and the file is always well-formed XML.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from pseudoformer.viewer.data import ViewData
from pseudoformer.viewer.layout import Box, Cluster, leaves, measure, place, route

CHAR_W, LINE_H, PAD_X, PAD_Y, MARGIN = 6.02, 12.0, 5.0, 3.0, 12.0
FOLDED_CHARS = 34
BUDGET = 160  # boxes that still read as one picture
STYLE = """
text { font: 10px 'DejaVu Sans Mono', Menlo, Consolas, monospace; fill: #1d2330; }
.node rect { fill: #fff; stroke: #8d96a8; }
.io rect { fill: #eef3fb; stroke: #1f5fbf; }
.box rect { fill: #f1f3f7; stroke: #7d8799; stroke-width: 1.2; }
.op { font-weight: bold; } .ty { fill: #5b6475; } .par { fill: #0b7a75; }
.cluster rect { stroke: #b5bdca; }
.cluster text { font-weight: bold; fill: #3c4556; }
.d1 rect { fill: #f4f6fa; } .d2 rect { fill: #eaf1fb; } .d3 rect { fill: #eef7ee; }
.d4 rect { fill: #fbf3e8; } .d5 rect { fill: #f5eef9; } .d6 rect { fill: #eef7f7; }
.edge { fill: none; stroke: #8d96a8; stroke-width: 1.1; }
"""


def _brief(type_: str) -> str:
    return type_[len("float32"):] if type_.startswith("float32[") else type_


def _lines(vd: ViewData, e: int, number: int, at: dict[int, int]) -> list[tuple[str, str]]:
    """%N op; what is folded into the node (a parameter by the last part of its name, a scalar
    by its value), packed into lines of up to FOLDED_CHARS; and the node's shape."""
    table = vd.table.entries
    ent = table[e]
    out = [(ent.name if ent.op == "input" else f"%{number} {ent.op}", "op")]
    folded = []
    for s in ent.src:
        src = table[at[s]]
        if not src.live:
            what = src.name.rsplit(".", 1)[-1] if src.op == "param" else src.name
            what = what if len(what) <= FOLDED_CHARS - 8 else what[: FOLDED_CHARS - 9] + "…"
            shape = _brief(src.type)
            folded.append(what if shape.endswith("[]") else f"{what} {shape}")
    line = ""
    for f in folded:
        if line and len(line) + 2 + len(f) > FOLDED_CHARS:
            out.append((line, "par"))
            line = ""
        line = f"{line}, {f}" if line else f
    if line:
        out.append((line, "par"))
    out.append((_brief(ent.type), "ty"))
    return out


def _depth_shown(keys: dict[int, str], budget: int) -> int:
    """The deepest level of groups to open, so that no more than `budget` boxes are drawn."""
    deepest = max((k.count("/") + 1 for k in keys.values() if k), default=0)
    for depth in range(deepest, 1, -1):
        if len({_shown(k, depth) or f"n{e}" for e, k in keys.items()}) <= budget:
            return depth
    return 1


def _shown(key: str, depth: int) -> str | None:
    """The collapsed group that stands for a node of group `key`, if any, when groups deeper than
    `depth` are closed."""
    parts = key.split("/") if key else []
    return "/".join(parts[: depth + 1]) if len(parts) > depth else None


def render_svg(vd: ViewData, budget: int = BUDGET) -> str:
    snap, keys, table = vd.snapshots[0], vd.groups[0], vd.table.entries
    depth = _depth_shown(keys, budget)
    root = Cluster("", [], framed=False)
    clusters: dict[str, Cluster] = {"": root}
    lines: dict[str, list[tuple[str, str]]] = {}
    rep: dict[int, str] = {}
    at = {table[x].stable: x for x in snap.entries}

    def cluster(key: str) -> Cluster:
        if key not in clusters:
            parent = cluster(key.rsplit("/", 1)[0] if "/" in key else "")
            clusters[key] = Cluster(key, [])
            parent.items.append(clusters[key])
        return clusters[key]

    def leaf(id_: str, where: str, text: list[tuple[str, str]]) -> None:
        lines[id_] = text
        w = max(len(t) for t, _ in text) * CHAR_W + 2 * PAD_X
        cluster(where).items.append(Box(id_, w, len(text) * LINE_H + 2 * PAD_Y))

    for number, e in enumerate(snap.entries):
        if not table[e].live:
            continue
        closed = _shown(keys[e], depth)
        rep[e] = f"g:{closed}" if closed else f"n:{e}"
        if rep[e] in lines:
            continue
        if closed:
            count = sum(1 for k in keys.values() if k == closed or k.startswith(closed + "/"))
            label = closed.rsplit("/", 1)[-1].replace("#", " #")
            leaf(rep[e], closed.rsplit("/", 1)[0], [(label, "op"), (f"+ {count} ops", "ty")])
        else:
            leaf(rep[e], keys[e], _lines(vd, e, number, at))
    edges: list[tuple[str, str]] = []
    for e in rep:
        for s in table[e].src:
            a = rep.get(at[s])
            if a is not None and a != rep[e] and (a, rep[e]) not in edges:
                edges.append((a, rep[e]))
    for j, (name, e) in enumerate(snap.outputs):
        leaf(f"o:{j}", "", [(name, "op")])
        if e in rep:
            edges.append((rep[e], f"o:{j}"))
    measure(root, edges)
    place(root, MARGIN, MARGIN + (LINE_H + 6 if snap.label else 0))
    return _draw(vd, root, lines, edges)


def _draw(vd: ViewData, root: Cluster, lines: dict[str, list[tuple[str, str]]], edges: list[tuple[str, str]]) -> str:
    w, h = root.w + 2 * MARGIN, root.h + root.y + MARGIN
    svg = ET.Element("svg", xmlns="http://www.w3.org/2000/svg", width=f"{w:.0f}", height=f"{h:.0f}",
                     viewBox=f"0 0 {w:.0f} {h:.0f}")
    ET.SubElement(svg, "title").text = f"{vd.name} ({vd.source})"
    ET.SubElement(svg, "style").text = STYLE
    marker = ET.SubElement(ET.SubElement(svg, "defs"), "marker", id="arrow", viewBox="0 0 10 10", refX="9",
                           refY="5", markerWidth="7", markerHeight="7", orient="auto")
    ET.SubElement(marker, "path", d="M0,0L10,5L0,10z", fill="#8d96a8")
    label = vd.snapshots[0].label
    if label:
        ET.SubElement(svg, "text", x=f"{MARGIN}", y=f"{MARGIN + 10}", **{"class": "op"}).text = f"{vd.name} {label}"
    _draw_cluster(svg, root, lines, vd)
    boxes = leaves(root)
    by_id = {b.id: b for b in boxes}
    group = ET.SubElement(svg, "g", **{"class": "edges"})
    lanes: dict[int, int] = {}
    for a, b in edges:
        ET.SubElement(group, "path", d=route(by_id[a], by_id[b], boxes, root, lanes),
                      **{"class": "edge", "marker-end": "url(#arrow)"})
    ET.indent(svg, space="")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(svg, encoding="unicode") + "\n"


def _draw_cluster(parent: ET.Element, c: Cluster, lines: dict[str, list[tuple[str, str]]], vd: ViewData) -> None:
    g = parent
    if c.framed:
        depth = c.key.count("/") + 1
        g = ET.SubElement(parent, "g", **{"class": f"cluster d{min(depth, 6)}", "data-scope": c.key})
        ET.SubElement(g, "title").text = c.key
        ET.SubElement(g, "rect", x=f"{c.x:.1f}", y=f"{c.y:.1f}", width=f"{c.w:.1f}", height=f"{c.h:.1f}", rx="6")
        ET.SubElement(g, "text", x=f"{c.x + 6:.1f}", y=f"{c.y + 14:.1f}").text = c.key.rsplit("/", 1)[-1].replace("#", " #")
    for it in c.items:
        if isinstance(it, Cluster):
            _draw_cluster(g, it, lines, vd)
            continue
        kind = {"g": "node box", "o": "node io"}.get(it.id[0], "node")
        if it.id.startswith("n:") and vd.table.entries[int(it.id[2:])].op == "input":
            kind = "node io"
        box = ET.SubElement(g, "g", **{"class": kind, "data-id": it.id})
        ET.SubElement(box, "rect", x=f"{it.x:.1f}", y=f"{it.y:.1f}", width=f"{it.w:.1f}", height=f"{it.h:.1f}",
                      rx="8" if "io" in kind else "3")
        for i, (text, cls) in enumerate(lines[it.id]):
            ET.SubElement(box, "text", x=f"{it.x + PAD_X:.1f}", y=f"{it.y + PAD_Y + LINE_H * i + 9.5:.1f}",
                          **{"class": cls}).text = text
