// Layout (dagre, a compound graph: expanded groups are clusters, collapsed ones boxes), drawing, pan and zoom.
const LINE = 14, PAD_X = 7, PAD_Y = 5;

function esc(s) {
  return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

let charWidth = 0;
function textWidth(s) {
  if (!charWidth) {
    const ctx = document.createElement("canvas").getContext("2d");
    ctx.font = "11px ui-monospace, Menlo, Consolas, monospace";
    charWidth = ctx.measureText("MMMMMMMMMM").width / 10 || 6.6;
  }
  return s.length * charWidth;
}

function boxSize(lines) {
  return { width: Math.ceil(Math.max(...lines.map((l) => textWidth(l[0])))) + 2 * PAD_X, height: lines.length * LINE + 2 * PAD_Y };
}

function layoutSnapshot(snap, expanded) {
  const data = snap.data;
  const g = new dagre.graphlib.Graph({ compound: true });
  g.setGraph({ rankdir: "TB", nodesep: 18, ranksep: 30, edgesep: 10, marginx: 24, marginy: 24 });
  g.setDefaultEdgeLabel(() => ({}));
  const clusters = new Set();
  const placeGroup = (gi) => {
    // An expanded group is a cluster inside its own parent, which is expanded too.
    if (clusters.has(gi)) return;
    clusters.add(gi);
    const grp = data.groups[gi];
    g.setNode("g" + gi, { kind: "cluster", group: gi, label: grp[G_LABEL], depth: grp[G_DEPTH] });
    if (grp[G_PARENT] >= 0) { placeGroup(grp[G_PARENT]); g.setParent("g" + gi, "g" + grp[G_PARENT]); }
  };
  const rep = new Map();
  for (const e of snap.live) {
    const r = representative(snap, expanded, e);
    rep.set(e, r);
    if (g.hasNode(r)) continue;
    let parent;
    if (r[0] === "n") {
      const lines = nodeLines(snap, e);
      const io = data.entries[e][E_OP] === "input";
      g.setNode(r, { kind: io ? "io" : "node", entry: e, lines, ...boxSize(lines) });
      parent = snap.groupOf.get(e);
    } else {
      const gi = +r.slice(1), lines = groupLines(snap, gi);
      g.setNode(r, { kind: "box", group: gi, lines, depth: data.groups[gi][G_DEPTH], ...boxSize(lines) });
      parent = data.groups[gi][G_PARENT];
    }
    if (parent >= 0) { placeGroup(parent); g.setParent(r, "g" + parent); }
  }
  snap.outputs.forEach(([name, e], j) => {
    const lines = [[name, "pfv-op"]];
    g.setNode("o" + j, { kind: "io", output: j, lines, ...boxSize(lines) });
    if (rep.has(e)) g.setEdge(rep.get(e), "o" + j);
  });
  // Edges go in last to first: dagre then orders siblings as the program does (heads.0 on the left).
  for (const e of [...snap.live].reverse()) {
    for (const se of snap.srcEntries(e)) {
      if (!rep.has(se)) continue;
      const a = rep.get(se), b = rep.get(e);
      if (a !== b) g.setEdge(a, b);
    }
  }
  dagre.layout(g);
  return { g, rep };
}

function edgePath(points) {
  let d = `M${points[0].x.toFixed(1)},${points[0].y.toFixed(1)}`;
  for (let i = 1; i < points.length - 1; i++) {
    const p = points[i], q = points[i + 1];
    d += ` Q${p.x.toFixed(1)},${p.y.toFixed(1)} ${((p.x + q.x) / 2).toFixed(1)},${((p.y + q.y) / 2).toFixed(1)}`;
  }
  const last = points[points.length - 1];
  return d + ` L${last.x.toFixed(1)},${last.y.toFixed(1)}`;
}

function boxSvg(id, n, classes, title) {
  const x = n.x - n.width / 2, y = n.y - n.height / 2;
  let s = `<g class="${classes}" data-id="${id}" transform="translate(${x.toFixed(1)},${y.toFixed(1)})">`;
  s += `<title>${esc(title)}</title><rect width="${n.width}" height="${n.height}" rx="${n.kind === "io" ? 10 : 4}"/>`;
  n.lines.forEach(([text, cls], i) => {
    s += `<text class="${cls}" x="${PAD_X}" y="${PAD_Y + LINE * i + 11}">${esc(text)}</text>`;
  });
  return s + "</g>";
}

class GraphView {
  constructor(viewer, host) {
    this.viewer = viewer;
    this.host = host;
    this.svg = host.querySelector("svg");
    this.view = { x: 0, y: 0, k: 1 };
    this.lay = null;
    this.bindPanZoom();
  }

  draw(snap, expanded) {
    const t0 = performance.now();
    this.lay = layoutSnapshot(snap, expanded);
    const { g } = this.lay;
    const arrow = this.viewer.uid + "-arrow";
    const parts = [`<defs><marker id="${arrow}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#8d96a8"/></marker></defs><g class="pfv-viewport">`];
    const clusters = g.nodes().map((v) => [v, g.node(v)]).filter(([, n]) => n.kind === "cluster");
    clusters.sort((a, b) => a[1].depth - b[1].depth);
    for (const [v, n] of clusters) {
      const hot = snap.changed.get(n.group) ? ` (${snap.changed.get(n.group)} changed)` : "";
      parts.push(`<g class="pfv-cluster pfv-d${Math.min(n.depth, 6)}" data-id="${v}"><rect x="${(n.x - n.width / 2).toFixed(1)}" y="${(n.y - n.height / 2).toFixed(1)}" width="${n.width.toFixed(1)}" height="${n.height.toFixed(1)}" rx="6"/>`
        + `<text x="${(n.x - n.width / 2 + 6).toFixed(1)}" y="${(n.y - n.height / 2 + 13).toFixed(1)}">▾ ${esc(n.label)}${esc(hot)}<title>${esc(snap.data.groups[n.group][G_KEY])}: click to collapse</title></text></g>`);
    }
    for (const e of g.edges()) parts.push(`<path class="pfv-edge" d="${edgePath(g.edge(e).points)}" marker-end="url(#${arrow})"/>`);
    for (const v of g.nodes()) {
      const n = g.node(v);
      if (n.kind === "cluster") continue;
      let cls = n.kind === "box" ? `pfv-node pfv-box pfv-d${Math.min(n.depth, 6)}` : n.kind === "io" ? "pfv-node pfv-io" : "pfv-node";
      let title = "";
      if (n.entry !== undefined) {
        if (snap.isNew.has(n.entry)) cls += " pfv-new";
        if (snap.isRewired.has(n.entry)) cls += " pfv-rewired";
        title = this.viewer.describe(n.entry);
      } else if (n.group !== undefined) {
        if (snap.changed.get(n.group)) cls += " pfv-new";
        title = `${snap.data.groups[n.group][G_KEY]}: click to expand`;
      }
      parts.push(boxSvg(v, n, cls, title));
    }
    parts.push("</g>");
    this.svg.innerHTML = parts.join("");
    this.viewport = this.svg.querySelector(".pfv-viewport");
    this.apply();
    return performance.now() - t0;
  }

  bounds() {
    const gr = this.lay.g.graph();
    return { width: gr.width || 1, height: gr.height || 1 };
  }

  // Whole graph if it is readable so, else as large as readable, from the top.
  fit(readable = true) {
    const W = this.host.clientWidth || 800, H = this.host.clientHeight || 600, b = this.bounds();
    let k = Math.min(W / b.width, H / b.height, 1.2);
    if (readable) k = Math.max(k, 0.7);
    // Centred; a picture taller than the window starts at its top, where the inputs are.
    this.view = { k, x: (W - b.width * k) / 2, y: b.height * k > H ? 0 : (H - b.height * k) / 2 };
    this.apply();
  }

  apply() {
    if (this.viewport) this.viewport.setAttribute("transform", `translate(${this.view.x.toFixed(1)},${this.view.y.toFixed(1)}) scale(${this.view.k.toFixed(4)})`);
  }

  // Screen position of a drawn item's top-left corner, to keep it in place across a relayout.
  screenOf(id) {
    if (!this.lay || !this.lay.g.hasNode(id)) return null;
    const n = this.lay.g.node(id);
    return { x: (n.x - n.width / 2) * this.view.k + this.view.x, y: (n.y - n.height / 2) * this.view.k + this.view.y };
  }

  pin(id, at) {
    const now = this.screenOf(id);
    if (!now || !at) return;
    this.view.x += at.x - now.x;
    this.view.y += at.y - now.y;
    this.apply();
  }

  center(id) {
    if (!this.lay.g.hasNode(id)) return;
    const n = this.lay.g.node(id), W = this.host.clientWidth, H = this.host.clientHeight;
    this.view.k = Math.max(this.view.k, 0.8);
    this.view.x = W / 2 - n.x * this.view.k;
    this.view.y = H / 2 - n.y * this.view.k;
    this.apply();
  }

  mark(ids, cls) {
    for (const el of this.svg.querySelectorAll("." + cls)) el.classList.remove(cls);
    for (const id of ids) {
      const el = this.svg.querySelector(`[data-id="${id}"]`);
      if (el) el.classList.add(cls);
    }
  }

  bindPanZoom() {
    let drag = null;
    this.moved = false;
    this.svg.addEventListener("pointerdown", (ev) => {
      drag = { x: ev.clientX, y: ev.clientY, vx: this.view.x, vy: this.view.y };
      this.moved = false;
    });
    this.svg.addEventListener("pointermove", (ev) => {
      if (!drag) return;
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (!this.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      if (!this.moved) { this.moved = true; this.host.classList.add("pfv-drag"); this.svg.setPointerCapture(ev.pointerId); }
      this.view.x = drag.vx + dx;
      this.view.y = drag.vy + dy;
      this.apply();
    });
    const end = () => { drag = null; this.host.classList.remove("pfv-drag"); };
    this.svg.addEventListener("pointerup", end);
    this.svg.addEventListener("pointercancel", end);
    // The wheel scrolls the picture; with Ctrl (or a pinch) it zooms about the pointer.
    this.svg.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      if (ev.ctrlKey || ev.metaKey) {
        const r = this.svg.getBoundingClientRect(), px = ev.clientX - r.left, py = ev.clientY - r.top;
        const k = Math.min(3, Math.max(0.05, this.view.k * Math.exp(-ev.deltaY * 0.002)));
        this.view.x = px - (px - this.view.x) * (k / this.view.k);
        this.view.y = py - (py - this.view.y) * (k / this.view.k);
        this.view.k = k;
      } else {
        this.view.x -= ev.deltaX;
        this.view.y -= ev.deltaY;
      }
      this.apply();
    }, { passive: false });
    this.svg.addEventListener("click", (ev) => {
      if (this.moved) return;
      const hit = ev.target.closest("[data-id]");
      this.viewer.clicked(hit ? hit.getAttribute("data-id") : null);
    });
  }

  zoom(f) {
    const W = this.host.clientWidth / 2, H = this.host.clientHeight / 2, k = Math.min(3, Math.max(0.05, this.view.k * f));
    this.view.x = W - (W - this.view.x) * (k / this.view.k);
    this.view.y = H - (H - this.view.y) * (k / this.view.k);
    this.view.k = k;
    this.apply();
  }
}
