"""Float16: the model computes in half precision, except where half precision loses too much.

Half precision loses too much in long sums and in exponentials: a softmax over a few hundred
positions or a layer norm's variance drifts visibly, and squaring an activation of a few hundred
overflows fp16's 65504. So the ops the registry marks as precision "anchor" (reductions, softmax)
compute in fp32, and so does every "follower" (elementwise and data-movement ops) whose value is
used *only* by such fp32 nodes — the squared deviations of a layer norm, the scaled and masked
attention scores — because those values exist only to be reduced. Everything else (matmuls, the
residual stream, the outputs) is fp16; attention keeps its softmax in fp32 (softmax_fp32).

Weights become fp16 (their PARAM types; backends convert the arrays), inputs keep their declared
types (a float input stays fp32 and is cast where it is used), data movement keeps whatever
precision its operand has, a comparison of mixed precisions compares in fp32, and every float
output is fp16. Casts are explicit nodes, one per value and type, so backends lower the graph as it
stands.
"""

from __future__ import annotations

from pseudoformer.ir import DType, Graph, Node, Op, TensorType
from pseudoformer.ir.ops import op_def

F32, F16 = DType.float32, DType.float16
_MOVES_DATA = {"transpose", "unsqueeze", "squeeze", "reshape", "axis", "gather"}


def fp32_nodes(graph: Graph) -> set[int]:
    """ids of the float nodes that compute in fp32: the anchors, followers only fp32 nodes read, and tables.

    A table is a float value computed from constants and integers alone, read from no weight and no float
    input: rotary embeddings' angles, position × b^(−2i/d). In fp16 their base (Llama's b = 10⁵, past fp16's
    65504) is ∞, and an angle at position 1000 is off by half a radian; they are [positions, d/2], cheap in
    fp32, and cast where the rotation reads them, as transformers computes its cos and sin. A size (DIM) reads
    no values: positions counted from a decode step's past length (the fp16 cache's) are integers still, and
    past 2048 fp16 would not even hold them."""
    nodes = graph.nodes()
    c = graph.consumers()
    keep: set[int] = set()
    reads_data: set[int] = set()
    for n in nodes:  # topological: every operand before its user
        if n.op in (Op.PARAM, Op.INPUT):
            if isinstance(n.type, TensorType) and n.dtype.is_float:
                reads_data.add(id(n))
        elif n.op is Op.DIM:  # a size: it reads its operand's shape, not its values (a decode step's past length)
            continue
        elif any(id(s) in reads_data for s in n.src):
            reads_data.add(id(n))
        elif n.op is not Op.CONST and isinstance(n.type, TensorType) and n.dtype.is_float:
            keep.add(id(n))
    # Reverse topological order visits every user before the value it uses.
    for n in reversed(nodes):
        if isinstance(n.type, TensorType) and not n.dtype.is_float:
            continue
        d = op_def(n.op)
        if d.precision == "anchor":
            keep.add(id(n))
        elif d.precision == "follower" and not c.is_output(n) and c.of(n) and all(id(u) in keep for u in c.of(n)):
            keep.add(id(n))
    return keep


class _Half:
    def __init__(self, graph: Graph, float_inputs: bool = False) -> None:
        self.float_inputs = float_inputs
        self.wide = fp32_nodes(graph)
        self.memo: dict[int, Node] = {}
        self.casts: dict[tuple[int, DType], Node] = {}
        self.consts: dict[tuple[int, DType], Node] = {}

    def value(self, n: Node, dtype: DType | None = None) -> Node:
        """The rebuilt n, as `dtype` if given: constants are made in the type wanted, others cast once."""
        if n.op is Op.CONST and dtype is not None and n.dtype.is_float:
            key = (id(n), dtype)
            if key not in self.consts:
                self.consts[key] = n if n.dtype is dtype else \
                    Node.at(n, Op.CONST, (), {**n.attrs, "dtype": dtype})
            return self.consts[key]
        x = self.memo[id(n)]
        if dtype is None or x.dtype is dtype:
            return x
        key = (id(x), dtype)
        if key not in self.casts:
            self.casts[key] = Node.at(x, Op.CAST, (x,), {"dtype": dtype})
        return self.casts[key]

    def _common(self, src: tuple[Node, ...], mixed: DType) -> DType:
        """The one precision the (non-constant) operands have, or `mixed` when they differ."""
        have = {self.memo[id(s)].dtype for s in src if s.op is not Op.CONST}
        return have.pop() if len(have) == 1 else mixed if have else F16

    def compute(self, n: Node) -> DType:
        return F32 if id(n) in self.wide else F16

    def node(self, n: Node) -> Node:
        op, attrs = n.op, dict(n.attrs)
        if op is Op.INPUT:
            t = n.type
            if not (self.float_inputs and isinstance(t, TensorType) and t.dtype is F32):
                return n
            return Node(Op.INPUT, (), {**attrs, "type": TensorType(F16, t.shape)}, span=n.span, scope=n.scope)
        if op is Op.PARAM:
            t = n.type
            return n if not t.dtype.is_float else \
                Node.at(n, Op.PARAM, (), {**attrs, "type": TensorType(F16, t.shape)})
        if op is Op.CONST:
            return n if not n.dtype.is_float else self.value(n, F16)
        d = op_def(op)
        if op in (Op.ATTENTION, Op.CACHED_ATTENTION):
            n_float = 5 if op is Op.CACHED_ATTENTION else 3
            # q, k, v in float16; a float mask (a score bias) in q's dtype, as the op requires
            src: tuple[Node, ...] = tuple(self.value(s, F16 if i < n_float or s.dtype.is_float else None)
                                          for i, s in enumerate(n.src))
            attrs["softmax_fp32"] = True
        elif op is Op.GET:  # a result of the op above, in the precision it has
            src = (self.value(n.src[0]),)
        elif op is Op.CAST:
            to = attrs["dtype"]
            attrs["dtype"] = self.compute(n) if to.is_float else to
            src = (self.value(n.src[0]),)
        elif op is Op.WHERE:
            want = self.compute(n) if n.dtype.is_float else None
            src = (self.value(n.src[0]), self.value(n.src[1], want), self.value(n.src[2], want))
        elif d.layout in _MOVES_DATA and op is not Op.CONCAT:
            # moving data changes no values: keep the operand's precision, unless in an fp32 region
            want = F32 if id(n) in self.wide and n.dtype.is_float else None
            src = (self.value(n.src[0], want), *(self.value(s) for s in n.src[1:]))
        elif op is Op.CONCAT:
            want = F32 if id(n) in self.wide else self._common(n.src, F16)
            src = tuple(self.value(s, want if n.dtype.is_float else None) for s in n.src)
        elif n.dtype is DType.bool and all(s.dtype.is_float for s in n.src):  # a comparison
            want = self._common(n.src, F32)
            src = tuple(self.value(s, want) for s in n.src)
        elif isinstance(n.type, TensorType) and n.dtype.is_float:
            want = self.compute(n)
            src = tuple(self.value(s, want if s.dtype.is_float else None) for s in n.src)
        else:  # sizes, masks, indices: no floats involved
            src = tuple(self.value(s) for s in n.src)
        if all(a is b for a, b in zip(src, n.src, strict=True)) and attrs == n.attrs:
            return n
        return Node.at(n, op, src, attrs)


def to_float16(graph: Graph, *, float_inputs: bool = False) -> tuple[Graph, bool]:
    """The graph computing in float16 as the module docstring says; float outputs are float16.

    float_inputs: the fp32 inputs become fp16 too, for a graph whose float inputs are its own outputs fed
    back (a decode step's past keys and values: the cache stays fp16 from one step to the next)."""
    h = _Half(graph, float_inputs)
    for n in graph.nodes():
        h.memo[id(n)] = h.node(n)
    outputs = []
    for name, n in graph.outputs:
        out = h.value(n, F16 if isinstance(n.type, TensorType) and n.dtype.is_float else None)
        outputs.append((name, out))
    new = Graph([h.memo.get(id(i), i) for i in graph.inputs], outputs, dict(graph.meta))
    return new, any(a is not b for (_, a), (_, b) in zip(graph.outputs, outputs, strict=True))
