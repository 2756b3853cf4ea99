"""Keep only the last position of an output: Y[:, ℓ] instead of Y, computed as late as possible.

    Y = f(X) position-wise, Y[:, ℓ] = f(X[:, ℓ])        (push the slice into the operands)
    attention(Q, K, V)[ℓ] = attention(Q[ℓ], K, V)         (causal is bottom-right aligned, so the
                                                          last query still sees every key)

Generation reads one column of the model's output per step (Algorithm 14, line 4: p ← P[:, ℓ+i−1]).
Sliced at the output only, the model would still unembed every position; pushed back through the
position-wise tail of the graph, the unembedding, the last MLP and the last layer's queries run for
one position. Where the slice cannot move further it is applied there, which is always correct;
it stops early at values computed for every position anyway (attention's keys and values, and what
other outputs need), so that no projection is computed twice.
"""

from __future__ import annotations

from pseudoformer.ir import Graph, Node, Op
from pseudoformer.ir.ops import op_def
from pseudoformer.ir.types import DType


def keep_last_position(graph: Graph, output: str, dim: str) -> Graph:
    """`graph` with output `output` cut to its last position along the axis of run-time size `dim`."""
    names = [name for name, _ in graph.outputs]
    if output not in names:
        raise ValueError(f"the graph has no output {output!r} (it has {', '.join(names)})")
    memo: dict[int, Node] = {id(n): _slice_last(n, dim) for n in _computed_in_full(graph, output) if dim in n.shape}
    outputs = [(name, _last(n, dim, memo) if name == output else n) for name, n in graph.outputs]
    return Graph(inputs=list(graph.inputs), outputs=outputs, meta=dict(graph.meta))


def _computed_in_full(graph: Graph, output: str) -> list[Node]:
    """Nodes every position of which is needed anyway: what other outputs read (a prefill's present
    keys and values), and the keys and values of attention. Slicing such a node is free; pushing the
    slice past it would compute its operands twice (a second Q/K/V projection for the last row)."""
    roots = [n for name, n in graph.outputs if name != output]
    roots += [s for n in graph.nodes() if n.op is Op.ATTENTION for s in n.src[1:]]
    seen: dict[int, Node] = {}
    for r in roots:
        for n in r.walk():
            seen.setdefault(id(n), n)
    return list(seen.values())


def _last(n: Node, dim: str, memo: dict[int, Node]) -> Node:
    if dim not in n.shape:
        return n  # the same for every position: broadcasts against the one kept
    if id(n) not in memo:
        memo[id(n)] = _push(n, dim, memo) or _slice_last(n, dim)
    return memo[id(n)]


def _push(n: Node, dim: str, memo: dict[int, Node]) -> Node | None:
    """The last position of n computed from the last positions of its operands, or None.

    The op's position rule (its OpDef in the registry) says which operands carry the positions;
    the others (weights, attention's keys and values) are read whole."""
    rule = op_def(n.op).positions
    carriers = rule(n, dim) if rule is not None else "no position rule"
    if isinstance(carriers, str):
        return None
    src = tuple(_last(s, dim, memo) if i in carriers else s for i, s in enumerate(n.src))
    attrs = dict(n.attrs)
    if "shape" in attrs:  # a reshape's target keeps one position where it had `dim`
        attrs["shape"] = [1 if d == dim else d for d in attrs["shape"]]
    return Node.at(n, n.op, src, attrs)


def _slice_last(n: Node, dim: str) -> Node:
    axis = n.shape.index(dim)
    size = Node.at(n, Op.DIM, (n,), {"axis": axis})
    one = Node(Op.CONST, (), {"value": 1, "dtype": DType.int64})
    start = Node.at(n, Op.SUB, (size, one))
    return Node.at(n, Op.SLICE, (n, start, size), {"axis": axis, "dim": 1})


def cut_from(x: Node) -> Node | None:
    """The value whose last position x is, when x is the cut `_slice_last` makes (x[…, ℓ−1:ℓ, …] along a
    run-time size ℓ); else None. For a backend that computes every position anyway and keeps the last."""
    if x.op is not Op.SLICE or x.attrs.get("dim") != 1:
        return None
    base, start, end = x.src
    size = base.shape[x.attrs["axis"] % base.type.rank]

    def is_size(d: Node) -> bool:
        return d.op is Op.DIM and d.src[0].shape[d.attrs["axis"] % d.src[0].type.rank] == size

    one = start.src[1] if start.op is Op.SUB else None
    if (isinstance(size, str) and is_size(end) and start.op is Op.SUB and is_size(start.src[0])
            and one is not None and one.op is Op.CONST and one.attrs["value"] == 1):
        return base
    return None
