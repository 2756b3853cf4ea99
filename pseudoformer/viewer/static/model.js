// The data the page carries, and what is visible: a snapshot's entries, its groups, their folding.
// Entry: [stable, op, type, src (stable ids), attrs, span ([file, line, col] or 0), name, live, group].
const E_STABLE = 0, E_OP = 1, E_TYPE = 2, E_SRC = 3, E_ATTRS = 4, E_SPAN = 5, E_NAME = 6, E_LIVE = 7, E_GROUP = 8;
const G_KEY = 0, G_LABEL = 1, G_PARENT = 2, G_DEPTH = 3;

async function inflate(b64) {
  // The payload is zlib-compressed JSON in base64: a fifth of its size, read back without any request.
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  return JSON.parse(await new Response(stream).text());
}

function unruns(rs) {
  const out = [];
  for (let i = 0; i < rs.length; i += 2) for (let k = 0; k < rs[i + 1]; k++) out.push(rs[i] + k);
  return out;
}

class Snapshot {
  constructor(data, k) {
    const s = data.snapshots[k];
    this.k = k;
    this.data = data;
    this.label = s.label;
    this.doc = s.doc;
    this.entries = unruns(s.entries);
    this.outputs = s.outputs;
    this.isNew = new Set(unruns(s.new));
    this.isRewired = new Set(unruns(s.rewired));
    this.removed = unruns(s.removed);
    this.number = new Map(this.entries.map((e, i) => [e, i]));
    this.byStable = new Map(this.entries.map((e) => [data.entries[e][E_STABLE], e]));
    this.groupOf = new Map();
    this.users = new Map();
    for (const e of this.entries) {
      const ent = data.entries[e];
      if (!ent[E_LIVE]) continue;
      const g = s.group[e] !== undefined ? s.group[e] : ent[E_GROUP];
      this.groupOf.set(e, g);
      for (const x of ent[E_SRC]) {
        const se = this.byStable.get(x);
        if (!this.users.has(se)) this.users.set(se, []);
        this.users.get(se).push(e);
      }
    }
    this.live = this.entries.filter((e) => data.entries[e][E_LIVE]);
    // Per group: how many live entries it holds (all depths), and how many this pass changed.
    this.size = new Map();
    this.changed = new Map();
    for (const e of this.live) {
      const hot = this.isNew.has(e) || this.isRewired.has(e);
      for (let g = this.groupOf.get(e); g >= 0; g = data.groups[g][G_PARENT]) {
        this.size.set(g, (this.size.get(g) || 0) + 1);
        if (hot) this.changed.set(g, (this.changed.get(g) || 0) + 1);
      }
    }
  }
  srcEntries(e) { return this.data.entries[e][E_SRC].map((x) => this.byStable.get(x)); }
  chain(e) {
    // The groups around e, outermost first.
    const out = [];
    for (let g = this.groupOf.get(e); g >= 0; g = this.data.groups[g][G_PARENT]) out.unshift(g);
    return out;
  }
  maxDepth() {
    let d = 0;
    for (const g of this.size.keys()) d = Math.max(d, this.data.groups[g][G_DEPTH]);
    return d;
  }
}

// What stands for entry e on screen: e itself, or the outermost collapsed group around it.
function representative(snap, expanded, e) {
  for (const g of snap.chain(e)) if (!expanded.has(snap.data.groups[g][G_KEY])) return "g" + g;
  return "n" + e;
}

// Groups down to the deepest depth at which no more than `budget` things are on screen.
function defaultExpansion(snap, budget) {
  const groups = snap.data.groups;
  let best = new Set();
  for (let depth = 1; depth <= snap.maxDepth(); depth++) {
    const expanded = new Set([...snap.size.keys()].filter((g) => groups[g][G_DEPTH] <= depth).map((g) => groups[g][G_KEY]));
    const shown = new Set(snap.live.map((e) => representative(snap, expanded, e)));
    if (depth > 1 && shown.size > budget) break;
    best = expanded;
  }
  return best;
}

function shortName(name) {
  // Parameter names carry their call path ("layers.0.W.heads.3.W_q"); the box shows the last part.
  const parts = name.split(".");
  return parts[parts.length - 1];
}

function shapeOf(type) {
  const i = type.indexOf("[");
  return i < 0 ? type : type.slice(i);
}

// float32 goes without saying in a box; other dtypes are named (the details show the full type).
function briefType(type) {
  return type.startsWith("float32[") ? shapeOf(type) : type;
}

// The lines of an entry's box: "%N op", one line per operand folded into it, and its type.
function nodeLines(snap, e) {
  const ent = snap.data.entries[e];
  const head = ent[E_OP] === "input" ? ent[E_NAME] : `%${snap.number.get(e)} ${ent[E_OP]}`;
  const lines = [[head, "pfv-op"]];
  for (const se of snap.srcEntries(e)) {
    const s = snap.data.entries[se];
    if (s[E_LIVE]) continue;
    const shape = shapeOf(s[E_TYPE]);
    const what = s[E_OP] === "param" ? shortName(s[E_NAME]) : s[E_NAME];
    lines.push([shape === "[]" ? what : `${what} ${shape}`, "pfv-par"]);
  }
  lines.push([briefType(ent[E_TYPE]), "pfv-ty"]);
  return lines;
}

function groupLines(snap, g) {
  const n = snap.size.get(g) || 0;
  return [[snap.data.groups[g][G_LABEL], "pfv-op"], [`+ ${n} op${n === 1 ? "" : "s"}`, "pfv-ty"]];
}

function entryMatches(snap, e, q) {
  const ent = snap.data.entries[e];
  if (q.startsWith("%")) return `%${snap.number.get(e)}` === q;
  const hit = (x) => x[E_OP].toLowerCase().includes(q) || x[E_NAME].toLowerCase().includes(q);
  // A parameter is found in the box it is folded into.
  return hit(ent) || snap.srcEntries(e).some((se) => !snap.data.entries[se][E_LIVE] && hit(snap.data.entries[se]));
}
