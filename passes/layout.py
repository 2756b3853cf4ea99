"""Row-major layout: activations in [batch, positions, features], X·Wᵀ matmuls, no transposes on the hot path.

The frontend lowers the paper literally, with column vectors: activations are [batch, features,
positions], weights multiply from the left, and reductions run over axis 1. This pass gives every
node a layout, a permutation L of its axes (its new value is np.transpose(old value, L)), and
rebuilds the graph so that each op computes its result directly in the layout chosen for it. The
per-op knowledge (which layouts an op absorbs, and how) is in layout_rules.py and
layout_shape_rules.py; here are the
choices, made in two sweeps over the graph:

  1. Backward, from the outputs (which keep their interface layout) to the inputs, each node learns
     the layout its users would like: the majority of their wishes, adjusted by the op itself
     (SOFTMAX, LAYER_NORM and reductions want their axis last; a MATMUL or ATTENTION can only take
     layouts that keep its last two axes last). What a node wants becomes its wish for its operands.
  2. Forward, from the inputs, each node takes the layout, among what it wants, what its operands'
     existing versions suggest (transpose sinking) and the identity, that costs the fewest new
     transposes of activations, counting a layout other than the wanted one as one transpose to come.
     A transpose is inserted only where an operand is needed in a layout it does not exist in yet,
     once per node and layout, so every user of it shares the one copy.

Values that depend on no input data, only on weights and sizes (PARAMs, slices of W_p, index masks),
are "static": they are built in whatever layout is asked of them by pushing the layout into them, so
a transposed weight is a TRANSPOSE of a PARAM, which ONNX Runtime folds into the initializer at load.
TRANSPOSE nodes of the input graph disappear into the layouts around them.
"""

from __future__ import annotations

from pseudoformer.ir import Graph, Node, Op, TensorType
from pseudoformer.ir.ops import ARITH, COMPARE, LOGICAL, UNARY
from pseudoformer.passes.cse import _freeze
from pseudoformer.passes.layout_rules import (
    Attention,
    AxisOp,
    Elementwise,
    IndexMask,
    Matmul,
    Perm,
    Reduce,
    Rule,
    SizeOf,
    Transpose,
    compose,
    ident,
    inverse,
)
from pseudoformer.passes.layout_shape_rules import Gather, Reshape, Squeeze, Unsqueeze

RULES: dict[Op, Rule] = {
    **{op: Elementwise() for op in UNARY | ARITH | COMPARE | LOGICAL | {Op.WHERE, Op.NOT, Op.CAST}},
    Op.TRANSPOSE: Transpose(), Op.MATMUL: Matmul(), Op.ATTENTION: Attention(),
    Op.SOFTMAX: AxisOp(), Op.LAYER_NORM: AxisOp(), Op.SLICE: AxisOp(), Op.CONCAT: AxisOp(),
    Op.REDUCE_SUM: Reduce(), Op.REDUCE_MAX: Reduce(), Op.REDUCE_MEAN: Reduce(),
    Op.UNSQUEEZE: Unsqueeze(), Op.SQUEEZE: Squeeze(), Op.GATHER: Gather(), Op.RESHAPE: Reshape(),
    Op.INDEX_MASK: IndexMask(), Op.DIM: SizeOf(),
}
_IDENTITY_ONLY = Rule()  # INPUT, PARAM, CONST, ARANGE and any op without a rule


def rule(op: Op) -> Rule:
    return RULES.get(op, _IDENTITY_ONLY)


class LayoutError(Exception):
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


def to_row_major(graph: Graph) -> tuple[Graph, bool]:
    nodes = graph.nodes()
    static = static_nodes(nodes)
    builder = _Builder(static, _wants(graph, nodes, static))
    for n in nodes:
        if id(n) not in static:
            builder.place(n)
    outputs = [(name, builder.get(n, ident(n.type.rank))) for name, n in graph.outputs]
    new = Graph(inputs=list(graph.inputs), outputs=outputs, meta=dict(graph.meta))
    if same_graph(graph, new):
        return graph, False
    return new, True


def _wants(graph: Graph, nodes: list[Node], static: set[int]) -> dict[int, Perm | None]:
    votes: dict[int, dict[Perm, int]] = {}

    def vote(n: Node, p: Perm) -> None:
        tally = votes.setdefault(id(n), {})
        tally[p] = tally.get(p, 0) + 1

    for _, n in graph.outputs:
        vote(n, ident(n.type.rank))
    want: dict[int, Perm | None] = {}
    for n in reversed(nodes):
        if id(n) in static:
            continue  # a static node is built in any layout asked of it, for free
        tally = votes.get(id(n))
        liked = max(tally, key=lambda p: tally[p]) if tally else None  # ties: the first vote
        r = rule(n.op)
        w = ident(n.type.rank) if n.type.rank < 2 else r.prefer(n, liked)
        want[id(n)] = w
        plan = r.plan(n, w, None) if w is not None else None
        for s, p in zip(n.src, plan or (), strict=False):
            if p is not None and s.type.rank >= 2 and id(s) not in static:
                vote(s, p)
    return want


class _Builder:
    """The rebuilt graph: for each input-graph node, its versions by layout."""

    def __init__(self, static: set[int], want: dict[int, Perm | None]) -> None:
        self.static = static
        self.want = want
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
            first = self.primary[id(n)]
            v = _transpose(have[first], first, L)
        _check(n, L, v)
        have[L] = v
        return v

    def place(self, n: Node) -> None:
        """Compute a non-static node in its cheapest layout (see the module docstring)."""
        r = rule(n.op)
        rank = n.type.rank
        wanted = self.want.get(id(n))
        cands: list[Perm] = [wanted] if wanted is not None else []
        for i, s in enumerate(n.src):
            if id(s) not in self.static and s.type.rank >= 2:
                for Q in self.versions.get(id(s), {}):
                    L = r.induce(n, i, Q)
                    if L is not None and sorted(L) == list(range(rank)):
                        cands.append(L)
        cands.append(ident(rank))
        avail = [list(self.versions.get(id(s), {})) if id(s) not in self.static else [] for s in n.src]
        best: tuple[int, Perm, list[Perm | None]] | None = None
        for L in dict.fromkeys(cands):
            plan = r.plan(n, L, avail)
            if plan is None:
                continue
            cost = sum(1 for s, p in zip(n.src, plan, strict=True)
                       if p is not None and id(s) not in self.static and p not in self.versions[id(s)])
            cost += wanted is not None and L != wanted
            if best is None or cost < best[0]:
                best = (cost, L, plan)
        if best is None:
            raise LayoutError(f"{n.op.value} absorbs no layout, not even the identity")
        _, L, plan = best
        src, lay = self._operands(n, plan)
        v = r.build(n, L, src, lay)
        _check(n, L, v)
        self.versions[id(n)] = {L: v}
        self.primary[id(n)] = L

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
    shape = tuple(v.shape[a] for a in perm)
    moved = [a for a in perm if v.shape[a] != 1]
    if moved == sorted(moved):
        # Only unit axes move: the data is already in order, and a reshape moves none of it.
        return Node(Op.RESHAPE, (v,), {"shape": shape}, span=v.span, scope=v.scope)
    return Node(Op.TRANSPOSE, (v,), {"perm": list(perm)}, span=v.span, scope=v.scope)


def _check(n: Node, L: Perm, v: Node) -> None:
    expect = TensorType(n.dtype, tuple(n.shape[a] for a in L))
    if v.type != expect:
        raise LayoutError(f"{n.op.value} in layout {list(L)} was built as {v.type}, expected {expect}")


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
                or _freeze(x.attrs) != _freeze(y.attrs):
            return False
        stack.extend(zip(x.src, y.src, strict=True))
    return True
