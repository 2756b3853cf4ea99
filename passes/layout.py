"""Row-major layout: activations in [batch, positions, features], X·Wᵀ matmuls, no transposes on the hot path.

The frontend lowers the paper literally, with column vectors: activations are [batch, features,
positions], weights multiply from the left, and reductions run over axis 1. This pass gives every
node a layout, a permutation L of its axes (its new value is np.transpose(old value, L)), and
rebuilds the graph so that each op computes its result directly in the layout chosen for it. The
per-op knowledge (which layouts an op absorbs, and how) is in layout_rules.py and
layout_shape_rules.py; here are the choices, made in two sweeps over the graph:

  1. Backward, from the outputs (which keep their interface layout) to the inputs, each node learns
     how its users would like it laid out: each user casts one vote, split over layouts as its own
     users' votes were, adjusted by the op itself (SOFTMAX and LAYER_NORM want their axis last, a
     reduction wants the reduced axes last in its operand, a MATMUL or ATTENTION only takes layouts
     that keep its last two axes last). A disagreement thus travels upstream as a split, not as a
     winner picked by chance.
  2. Forward, from the inputs, each node takes the layout, among those its users want, those its
     operands' existing versions suggest (transpose sinking) and the identity, that costs least:
     one per operand that must be transposed into a layout it does not exist in yet, plus the share
     of users that will not get the layout they want (each will need a transpose), plus the op's own
     price for the layout (2 for a softmax or layer norm off the last axis). Layouts that differ only
     in where unit axes sit hold the same data, and moving between them is a free view.
     A transpose is inserted once per node and layout, so every user of it shares the one copy.

Values that depend on no input data, only on weights and sizes (PARAMs, slices of W_p, index masks),
are "static": they are built in whatever layout is asked of them by pushing the layout into them, so
a transposed weight is a TRANSPOSE of a PARAM, which ONNX Runtime folds into the initializer at load.
TRANSPOSE nodes of the input graph disappear into the layouts around them.
"""

from __future__ import annotations

from pseudoformer.ir import Graph, Node, Op, TensorType, TupleType
from pseudoformer.ir.ops import op_def
from pseudoformer.passes.layout_rules import (
    Attention,
    AxisOp,
    Elementwise,
    IndexMask,
    LayoutRule,
    Matmul,
    Perm,
    Reduce,
    Rotary,
    SizeOf,
    Transpose,
    compose,
    ident,
    inverse,
    normalising,
)
from pseudoformer.passes.layout_shape_rules import Gather, Reshape, Squeeze, Unsqueeze

# The rule for each layout kind an op declares in the op registry (OpDef.layout).
RULES: dict[str, LayoutRule] = {
    "elementwise": Elementwise(), "transpose": Transpose(), "matmul": Matmul(), "attention": Attention(),
    "normalise": AxisOp(), "axis": AxisOp(), "reduce": Reduce(), "unsqueeze": Unsqueeze(), "squeeze": Squeeze(),
    "gather": Gather(), "reshape": Reshape(), "index_mask": IndexMask(), "size": SizeOf(), "rotary": Rotary(),
    "fixed": LayoutRule(),  # INPUT, PARAM, CONST, ARANGE: only the identity layout
}


def rule(op: Op) -> LayoutRule:
    return RULES[op_def(op).layout]


class LayoutRuleError(Exception):
    """A rule built a node whose type is not the layout it promised: a bug in this pass."""


def static_nodes(nodes: list[Node]) -> set[int]:
    """ids of the nodes whose values depend on no input data (DIM reads only a size)."""
    static: set[int] = set()
    for n in nodes:
        if n.op is not Op.INPUT and (n.op is Op.DIM or all(id(s) in static for s in n.src)):
            static.add(id(n))
    return static


def activation_transposes(graph: Graph) -> int:
    """TRANSPOSE nodes that move input-dependent data at run time (not those of weights)."""
    nodes = graph.nodes()
    static = static_nodes(nodes)
    return sum(1 for n in nodes if n.op is Op.TRANSPOSE and id(n.src[0]) not in static)


def data_movement(graph: Graph) -> int:
    """Transposes of activations a graph will run, counting the two ONNX Runtime's Softmax (and the
    backend's LayerNormalization) hide inside each one over another axis than the last."""
    hidden = sum(2 for n in graph.nodes()
                 if normalising(n) and n.attrs["axis"] % n.type.rank != n.type.rank - 1)
    return activation_transposes(graph) + hidden


def to_row_major(graph: Graph) -> tuple[Graph, bool]:
    """`graph` with activations row-major, and whether that changed it. The choices are greedy, so on
    graphs unlike a transformer (outputs pinned to several odd layouts) they can cost more than they
    save; then the graph comes back as it was: the pass never adds data movement."""
    nodes = graph.nodes()
    static = static_nodes(nodes)
    builder = _Builder(static, _wants(graph, nodes, static))
    for n in nodes:
        if id(n) not in static:
            builder.place(n)
    outputs = [(name, builder.get(n, ident(n.type.rank))) for name, n in graph.outputs]
    new = Graph(inputs=list(graph.inputs), outputs=outputs, meta=dict(graph.meta))
    if same_graph(graph, new) or data_movement(new) > data_movement(graph):
        return graph, False
    return new, True


def _wants(graph: Graph, nodes: list[Node], static: set[int]) -> dict[int, dict[Perm, float]]:
    """How each non-static node's users would like it laid out, as shares of one vote, from the outputs back.

    Each user casts one vote, split over layouts as its own users' votes were, so a node whose users
    disagree passes the disagreement on upstream rather than a winner picked by chance.
    """
    tallies: dict[int, dict[Perm, float]] = {}

    def vote(n: Node, p: Perm, weight: float) -> None:
        tally = tallies.setdefault(id(n), {})
        tally[p] = tally.get(p, 0.0) + weight

    for _, n in graph.outputs:
        vote(n, ident(n.type.rank), 1.0)
    splits: dict[int, dict[Perm, float]] = {}
    for n in reversed(nodes):
        if id(n) in static:
            continue  # a static node is built in any layout asked of it, for free
        r = rule(n.op)
        split: dict[Perm, float] = {}
        tally = tallies.get(id(n), {})
        if n.type.rank < 2:
            split = {ident(n.type.rank): 1.0}
        elif not tally:
            own = r.prefer(n, None)
            split = {own: 1.0} if own is not None else {}
        else:
            total = sum(tally.values())
            for p, w in tally.items():
                q = r.prefer(n, p)
                if q is not None:
                    split[q] = split.get(q, 0.0) + w / total
        splits[id(n)] = split
        for p, w in split.items():
            for s, q in zip(n.src, r.plan(n, p, None) or (), strict=False):
                if q is not None and s.type.rank >= 2 and id(s) not in static:
                    vote(s, q, w)
    return splits


def _canonical(n: Node, L: Perm) -> Perm:
    """The representative of the layouts of n that hold its data in the same order: they differ only
    in where its unit axes sit, and moving those is a free view. Unit axes stay put; the rest keep L's order."""
    units = [a for a in L if n.shape[a] == 1]
    if not units:
        return L
    rest = iter(a for a in L if n.shape[a] != 1)
    return tuple(a if n.shape[a] == 1 else next(rest) for a in range(len(L)))


class _Builder:
    """The rebuilt graph: for each input-graph node, its versions by layout."""

    def __init__(self, static: set[int], splits: dict[int, dict[Perm, float]]) -> None:
        self.static = static
        self.splits = splits
        self.versions: dict[int, dict[Perm, Node]] = {}
        self.primary: dict[int, Perm] = {}  # the layout a non-static node was computed in

    def get(self, n: Node, L: Perm) -> Node:
        """The version of n in layout L, built (static n) or transposed (placed n) if it is new."""
        have = self.versions.setdefault(id(n), {})
        if L in have:
            return have[L]
        if id(n) in self.static:
            r = rule(n.op)
            plan = r.plan(n, L, None)
            if plan is None:
                v = _transpose(self.get(n, ident(len(L))), ident(len(L)), L)
            else:
                src, lay = self._operands(n, plan)
                v = r.build(n, L, src, lay)
        else:
            first = self._nearest(n, L)
            v = _transpose(have[first], first, L)
        _check(n, L, v)
        have[L] = v
        return v

    def place(self, n: Node) -> None:
        """Compute a non-static node in its cheapest layout (see the module docstring)."""
        r = rule(n.op)
        rank = n.type.rank
        share: dict[Perm, float] = {}
        for p, w in self.splits.get(id(n), {}).items():
            share[_canonical(n, p)] = share.get(_canonical(n, p), 0.0) + w
        cands: list[Perm] = sorted(self.splits.get(id(n), {}), key=lambda p: -share[_canonical(n, p)])
        for i, s in enumerate(n.src):
            if id(s) not in self.static and s.type.rank >= 2:
                for Q in self.versions.get(id(s), {}):
                    L = r.induce(n, i, Q)
                    if L is not None and sorted(L) == list(range(rank)):
                        cands.append(L)
        cands.append(ident(rank))
        avail = [list(self.versions.get(id(s), {})) if id(s) not in self.static else [] for s in n.src]
        best: tuple[float, Perm, list[Perm | None]] | None = None
        for L in dict.fromkeys(cands):
            plan = r.plan(n, L, avail)
            if plan is None:
                continue
            cost = r.cost(n, L) + sum(self._cost(s, p) for s, p in zip(n.src, plan, strict=True))
            # Users left without the layout they want will each need it transposed (once, shared).
            cost += 1.0 - share.get(_canonical(n, L), 0.0) if share else 0.0
            if best is None or cost < best[0] - 1e-9:
                best = (cost, L, plan)
        if best is None:
            raise LayoutRuleError(f"{n.op.value} absorbs no layout, not even the identity")
        _, L, plan = best
        src, lay = self._operands(n, plan)
        v = r.build(n, L, src, lay)
        _check(n, L, v)
        self.versions[id(n)] = {L: v}
        self.primary[id(n)] = L

    def _nearest(self, n: Node, L: Perm) -> Perm:
        """The existing layout of n to derive layout L from: one only a view away if there is one."""
        have = self.versions[id(n)]
        for h, v in have.items():
            if _moves_only_units(v, compose(inverse(h), L)):
                return h
        return self.primary[id(n)]

    def _cost(self, s: Node, p: Perm | None) -> float:
        """What it costs to have operand s in layout p: a transpose, unless it exists or moves no data."""
        if p is None or id(s) in self.static or p in self.versions[id(s)]:
            return 0.0
        h = self._nearest(s, p)
        return 0.0 if _moves_only_units(self.versions[id(s)][h], compose(inverse(h), p)) else 1.0

    def _operands(self, n: Node, plan: list[Perm | None]) -> tuple[list[Node], list[Perm]]:
        src: list[Node] = []
        lay: list[Perm] = []
        for s, p in zip(n.src, plan, strict=True):
            if p is None:  # any layout: the one it was computed in
                p = self.primary.get(id(s), ident(s.type.rank))
            src.append(self.get(s, p))
            lay.append(p)
        return src, lay


def _transpose(v: Node, have: Perm, want: Perm) -> Node:
    """v, which holds a value in layout `have`, moved to layout `want`."""
    perm = compose(inverse(have), want)
    if perm == ident(len(perm)):
        return v
    if v.op is Op.TRANSPOSE:  # fold into the transpose that made v rather than stack another
        perm = compose(v.attrs["perm"], perm)
        v = v.src[0]
        if perm == ident(len(perm)):
            return v
    if _moves_only_units(v, perm):
        return _view(v, perm)
    return Node.at(v, Op.TRANSPOSE, (v,), {"perm": list(perm)})


def _view(v: Node, perm: Perm) -> Node:
    """v with only unit axes moved: the data is already in order, so a view of it, not a transpose,
    and a view of what v views if v is one itself, so that views do not stack."""
    shape = tuple(v.shape[a] for a in perm)
    if shape == v.shape:
        return v
    if v.op is Op.UNSQUEEZE:
        base = v.src[0]
        ins = [a % v.type.rank for a in v.attrs["axes"]]
        moved = Node.at(v, Op.UNSQUEEZE, (base,), {"axes": sorted(perm.index(a) for a in ins)})
        if moved.shape == shape:
            return moved
    if v.op in (Op.UNSQUEEZE, Op.RESHAPE):
        v = v.src[0]
        if v.shape == shape:
            return v
    return Node.at(v, Op.RESHAPE, (v,), {"shape": shape})


def _moves_only_units(v: Node, perm: Perm) -> bool:
    moved = [a for a in perm if v.shape[a] != 1]
    return moved == sorted(moved)


def _check(n: Node, L: Perm, v: Node) -> None:
    if isinstance(n.type, TupleType):  # several results: laid out by the `get`s that take them apart
        expect: TensorType | TupleType = n.type
    else:
        expect = TensorType(n.dtype, tuple(n.shape[a] for a in L))
    if v.type != expect:
        raise LayoutRuleError(f"{n.op.value} in layout {list(L)} was built as {v.type}, expected {expect}")


def same_graph(a: Graph, b: Graph) -> bool:
    """Whether a and b compute the same nodes (op, attributes, types, operand structure)."""
    if [m for m, _ in a.outputs] != [m for m, _ in b.outputs]:
        return False
    stack = [(x, y) for (_, x), (_, y) in zip(a.outputs, b.outputs, strict=True)]
    seen: set[tuple[int, int]] = set()
    while stack:
        x, y = stack.pop()
        if x is y or (id(x), id(y)) in seen:
            continue
        seen.add((id(x), id(y)))
        if x.op is not y.op or x.type != y.type or len(x.src) != len(y.src) \
                or _frozen(x.attrs) != _frozen(y.attrs):
            return False
        stack.extend(zip(x.src, y.src, strict=True))
    return True


def _frozen(v: object) -> object:
    """Attributes compared by value: lists and tuples alike, NaN equal to itself."""
    if isinstance(v, dict):
        return tuple(sorted((k, _frozen(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_frozen(x) for x in v)
    if isinstance(v, float) and v != v:
        return ("nan",)
    return v
