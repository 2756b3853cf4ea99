// The page: toolbar, graph, the selection's details and the source panel, kept in step.
const BUDGET = 70; // things on screen that still read as an overview
const MAX_BOXES = 600; // what "+ level" opens at most

class Viewer {
  constructor(root, data) {
    this.root = root;
    this.uid = root.id;
    this.data = data;
    this.cache = new Map();
    this.groupIndex = new Map(data.groups.map((g, i) => [g[G_KEY], i]));
    this.graph = new GraphView(this, root.querySelector(".pfv-graph"));
    this.info = root.querySelector(".pfv-info");
    this.source = root.querySelector(".pfv-source");
    this.status = root.querySelector(".pfv-status");
    this.selected = null;
    this.highlight = [];
    this.results = [];
    this.file = -1;
    this.bindBar();
    this.use(data.initial);
    this.expanded = defaultExpansion(this.snap, BUDGET);
    this.redraw();
    this.graph.fit();
    this.showPass();
    this.showFile(Math.max(0, data.files.findIndex((f) => f[0] === data.source)));
    root.setAttribute("data-ready", "1");
  }

  use(k) {
    if (!this.cache.has(k)) this.cache.set(k, new Snapshot(this.data, k));
    this.snap = this.cache.get(k);
    // file → line → the live entries that the line made, for the source panel.
    this.lines = new Map();
    for (const e of this.snap.live) {
      const span = this.data.entries[e][E_SPAN];
      if (!span) continue;
      if (!this.lines.has(span[0])) this.lines.set(span[0], new Map());
      const byLine = this.lines.get(span[0]);
      if (!byLine.has(span[1])) byLine.set(span[1], []);
      byLine.get(span[1]).push(e);
    }
  }

  redraw(pinned) {
    const at = pinned ? this.graph.screenOf(pinned) : null;
    const ms = this.graph.draw(this.snap, this.expanded);
    const shown = this.graph.lay.g.nodeCount();
    this.status.textContent = `${this.snap.live.length} ops · ${shown} boxes · laid out in ${Math.round(ms)} ms`;
    if (pinned) this.graph.pin(pinned, at);
    this.remark();
  }

  remark() {
    const rep = this.graph.lay.rep;
    this.graph.mark(this.highlight.map((e) => rep.get(e)).filter(Boolean), "pfv-hl");
    this.graph.mark(this.selected !== null && rep.has(this.selected) ? [rep.get(this.selected)] : [], "pfv-sel");
  }

  describe(e) {
    const ent = this.data.entries[e], span = ent[E_SPAN];
    const where = span ? `\n${this.data.files[span[0]][0]}:${span[1]}:${span[2]}` : "";
    const inner = this.snap.chain(e).pop();
    return `%${this.snap.number.get(e)} = ${ent[E_OP]} : ${ent[E_TYPE]}\n${inner === undefined ? "" : this.data.groups[inner][G_KEY]}${where}`;
  }

  clicked(id) {
    if (!id) return;
    if (id[0] === "g") {
      const key = this.data.groups[+id.slice(1)][G_KEY];
      if (this.expanded.has(key)) this.expanded.delete(key); else this.expanded.add(key);
      this.redraw(id);
    } else if (id[0] === "n") {
      this.select(+id.slice(1), false);
    } else if (id[0] === "o") {
      this.select(this.snap.outputs[+id.slice(1)][1], false);
    }
  }

  // Expand what hides e, select it, show its details and its source line.
  select(e, reveal, keepHighlight) {
    this.selected = e;
    if (!keepHighlight) this.highlight = [];
    if (reveal) this.reveal(e);
    this.remark();
    this.showEntry(e);
    const span = this.data.entries[e][E_SPAN];
    if (span) this.showFile(span[0], span[1], span[2]);
  }

  reveal(e) {
    let grew = false;
    for (const g of this.snap.chain(e)) {
      const key = this.data.groups[g][G_KEY];
      if (!this.expanded.has(key)) { this.expanded.add(key); grew = true; }
    }
    if (grew) this.redraw();
    this.graph.center("n" + e);
  }

  link(e) {
    const ent = this.data.entries[e];
    const what = ent[E_OP] === "input" ? `${ent[E_NAME]} (input)` : `%${this.snap.number.get(e)} ${ent[E_OP]}`;
    return `<span class="pfv-link" data-entry="${e}">${esc(what)}</span>`;
  }

  showEntry(e) {
    const ent = this.data.entries[e], snap = this.snap, span = ent[E_SPAN];
    const rows = [["op", esc(ent[E_OP])], ["type", esc(ent[E_TYPE])]];
    for (const [k, v] of Object.entries(ent[E_ATTRS])) rows.push([esc(k), esc(v)]);
    const chain = snap.chain(e).map((g) => this.data.groups[g][G_LABEL]);
    rows.push(["scope", esc(chain.join(" / ") || "(the graph's inputs)")]);
    if (span) {
      const [file, lines] = this.data.files[span[0]];
      rows.push(["source", `<span class="pfv-link" data-file="${span[0]}" data-line="${span[1]}">${esc(file)}:${span[1]}:${span[2]}</span>`]);
      if (lines[span[1] - 1] !== undefined) rows.push(["line", `<span class="pfv-srcline">${esc(lines[span[1] - 1].trim())}</span>`]);
    }
    const operands = snap.srcEntries(e).map((se) => {
      const s = this.data.entries[se];
      return s[E_LIVE] ? this.link(se) : `${esc(s[E_NAME])} : ${esc(s[E_TYPE])} <span class="pfv-hint">(${s[E_OP] === "param" ? "parameter" : "folded"})</span>`;
    });
    if (operands.length) rows.push(["operands", operands.join("<br>")]);
    const users = snap.users.get(e) || [];
    if (users.length) rows.push(["users", users.slice(0, 40).map((u) => this.link(u)).join(", ") + (users.length > 40 ? ", …" : "")]);
    if (snap.isNew.has(e)) rows.push(["this pass", `new in ${esc(snap.label)}`]);
    if (snap.isRewired.has(e)) rows.push(["this pass", `operands rewired by ${esc(snap.label)}`]);
    const head = ent[E_OP] === "input" ? `input ${ent[E_NAME]}` : `%${snap.number.get(e)} = ${ent[E_OP]}`;
    this.info.innerHTML = `<h3>${esc(head)}</h3><table>${rows.map(([k, v]) => `<tr><td>${k}</td><td>${v}</td></tr>`).join("")}</table>`;
  }

  showFile(f, line, col) {
    const files = this.data.files;
    if (!files.length) { this.source.innerHTML = `<div class="pfv-files pfv-hint">no source</div>`; return; }
    if (f !== this.file) {
      const [, lines] = files[f];
      const marked = this.lines.get(f) || new Map();
      const opts = files.map(([name], i) => `<option value="${i}"${i === f ? " selected" : ""}>${esc(name)}</option>`).join("");
      const body = lines.length ? lines.map((t, i) => `<div class="pfv-line${marked.has(i + 1) ? " pfv-has" : ""}" data-line="${i + 1}"><i>${i + 1}</i>${esc(t)}</div>`).join("")
        : `<div class="pfv-hint">the file could not be read when this page was made</div>`;
      this.source.innerHTML = `<div class="pfv-files"><select class="pfv-file">${opts}</select></div>${body}`;
      this.file = f;
    }
    for (const el of this.source.querySelectorAll(".pfv-cur")) el.classList.remove("pfv-cur");
    if (line) {
      const el = this.source.querySelector(`.pfv-line[data-line="${line}"]`);
      if (el) {
        el.classList.add("pfv-cur");
        const text = files[f][1][line - 1] || "";
        if (col && col <= text.length) {
          el.innerHTML = `<i>${line}</i>${esc(text.slice(0, col - 1))}<span class="pfv-caret">${esc(text[col - 1])}</span>${esc(text.slice(col))}`;
        }
        el.scrollIntoView({ block: "center" });
      }
    }
  }

  refreshSourceMarks() {
    const marked = this.lines.get(this.file) || new Map();
    for (const el of this.source.querySelectorAll(".pfv-line")) el.classList.toggle("pfv-has", marked.has(+el.dataset.line));
  }

  // The reverse of a selection: the nodes a source line made.
  selectLine(f, line) {
    const hits = (this.lines.get(f) || new Map()).get(line) || [];
    if (!hits.length) return;
    this.highlight = hits;
    this.select(hits[0], true, true);
    this.showFile(f, line);
    if (hits.length > 1) {
      const list = hits.slice(0, 100).map((e) => `<li>${this.link(e)} <span class="pfv-hint">${esc(this.snap.chain(e).map((g) => this.data.groups[g][G_LABEL]).join("/"))}</span></li>`).join("");
      this.info.innerHTML = `<h3>${esc(this.data.files[f][0])}:${line} made ${hits.length} nodes</h3><ol class="pfv-list">${list}</ol>${hits.length > 100 ? "<p class=pfv-hint>…</p>" : ""}`;
    }
  }

  search(q) {
    q = q.trim().toLowerCase();
    if (!q) { this.results = []; this.highlight = []; this.remark(); this.showPass(); return; }
    if (this.results.query === q && this.results.length) {
      this.results.at = (this.results.at + 1) % this.results.length;  // Enter again: the next match
      this.select(this.results[this.results.at], true, true);
      return;
    }
    this.results = this.snap.live.filter((e) => entryMatches(this.snap, e, q));
    this.results.query = q;
    this.results.at = -1;
    this.highlight = this.results;
    this.remark();
    const list = this.results.slice(0, 200).map((e) => `<li>${this.link(e)} <span class="pfv-hint">${esc(this.data.entries[e][E_TYPE])}</span></li>`).join("");
    this.info.innerHTML = `<h3>${this.results.length} match${this.results.length === 1 ? "" : "es"} for “${esc(q)}”</h3><p class="pfv-hint">Enter steps through them.</p><ol class="pfv-list">${list}</ol>`;
  }

  showPass() {
    const s = this.snap, d = this.data;
    const counts = (xs) => {
      const c = new Map();
      for (const e of xs) c.set(d.entries[e][E_OP], (c.get(d.entries[e][E_OP]) || 0) + 1);
      return [...c].sort((a, b) => b[1] - a[1]).map(([op, n]) => `${esc(op)} ×${n}`).join(", ");
    };
    const liveOf = (xs) => xs.filter((e) => d.entries[e][E_LIVE]);
    const added = liveOf([...s.isNew]), rewired = liveOf([...s.isRewired]), removed = liveOf(s.removed);
    let html = `<h3>${esc(s.k === 0 ? "-O0" : `after ${s.label} (${s.k} of ${d.snapshots.length - 1})`)}</h3><p class="pfv-hint">${esc(s.doc)}</p>`;
    if (s.k > 0) {
      html += `<table><tr><td>new</td><td>${added.length} ${added.length ? "(" + counts(added) + ")" : ""}</td></tr>`
        + `<tr><td>rewired</td><td>${rewired.length}</td></tr><tr><td>removed</td><td>${removed.length} ${removed.length ? "(" + counts(removed) + ")" : ""}</td></tr></table>`;
      if (added.length) html += `<ol class="pfv-list">${added.slice(0, 60).map((e) => `<li>${this.link(e)}</li>`).join("")}</ol>`;
    }
    html += `<p class="pfv-legend"><span><b style="border-color:#1a9a3a"></b> new</span><span><b style="border-color:#d68a00;border-style:dashed"></b> rewired</span><span><b style="border-color:#d6336c"></b> selected</span></p>`;
    html += `<p class="pfv-hint">Click a box to see it, a group to open or close it, a source line for its nodes. Drag to move; wheel to scroll, Ctrl+wheel to zoom.</p>`;
    this.info.innerHTML = html;
  }

  setPass(k) {
    this.use(k);
    if (this.selected !== null && !this.snap.number.has(this.selected)) this.selected = null;
    this.highlight = this.highlight.filter((e) => this.snap.number.has(e));
    this.redraw();
    this.refreshSourceMarks();
    this.showPass();
  }

  depthOfExpansion() {
    let d = 0;
    for (const key of this.expanded) if (this.groupIndex.has(key)) d = Math.max(d, this.data.groups[this.groupIndex.get(key)][G_DEPTH]);
    return d;
  }

  expandLevel(delta) {
    const d = this.depthOfExpansion() + (delta > 0 ? 1 : 0);
    const next = new Set(this.expanded);
    for (const g of this.snap.size.keys()) {
      const [key, , , depth] = this.data.groups[g];
      if (delta > 0 && depth <= d) next.add(key);
      if (delta < 0 && depth >= d) next.delete(key);
    }
    // dagre takes seconds past several hundred boxes; open groups one by one instead.
    const boxes = new Set(this.snap.live.map((e) => representative(this.snap, next, e))).size;
    if (delta > 0 && boxes > MAX_BOXES) {
      this.status.textContent = `another level would draw ${boxes} boxes; click the groups to open them one by one`;
      return;
    }
    this.expanded = next;
    this.redraw();
    this.graph.fit();
  }

  bindBar() {
    const r = this.root, pass = r.querySelector(".pfv-pass");
    pass.innerHTML = this.data.snapshots.map((s, k) => {
      const same = k > 0 && !s.new.length && !s.rewired.length && !s.removed.length;
      return `<option value="${k}">${esc(k === 0 ? "-O0 (literal)" : `${k}. after ${s.label}${same ? " (no change)" : ""}`)}</option>`;
    }).join("");
    pass.value = String(this.data.initial);
    pass.addEventListener("change", () => this.setPass(+pass.value));
    const box = r.querySelector(".pfv-search");
    box.addEventListener("keydown", (ev) => { if (ev.key === "Enter") this.search(box.value); });
    box.addEventListener("search", () => { if (!box.value) this.search(""); });  // the clear button
    const acts = {
      fit: () => this.graph.fit(false), zin: () => this.graph.zoom(1.25), zout: () => this.graph.zoom(0.8),
      more: () => this.expandLevel(1), less: () => this.expandLevel(-1),
      overview: () => { this.expanded = defaultExpansion(this.snap, BUDGET); this.redraw(); this.graph.fit(); },
    };
    for (const b of r.querySelectorAll("[data-act]")) b.addEventListener("click", () => acts[b.dataset.act]());
    r.querySelector(".pfv-side").addEventListener("click", (ev) => {
      const t = ev.target.closest("[data-entry],[data-line]");
      if (!t) return;
      if (t.dataset.entry !== undefined) this.select(+t.dataset.entry, true, true);
      else if (t.dataset.file !== undefined) this.showFile(+t.dataset.file, +t.dataset.line);
      else if (t.classList.contains("pfv-has")) this.selectLine(this.file, +t.dataset.line);
    });
    r.querySelector(".pfv-side").addEventListener("change", (ev) => {
      if (ev.target.classList.contains("pfv-file")) this.showFile(+ev.target.value);
    });
  }
}

function boot(root, packed) {
  inflate(packed).then((data) => { root.viewer = new Viewer(root, data); }).catch((err) => {
    root.querySelector(".pfv-status").textContent = `this page cannot show the graph: ${err}`;
  });
}
