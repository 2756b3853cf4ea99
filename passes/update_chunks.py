"""The update graph of a split training step (split_step.py) cut into cache-sized pieces: each large
parameter's update becomes one copy of its elementwise nodes per run of CHUNK consecutive elements, over
inputs and outputs that are views of the parameter's, its gradient's and its state's buffers.

Why: AdamW's update is a dozen elementwise nodes per parameter (θ·(1−ηλ), m's and v's moving averages,
√v, the quotient, …). Run over a whole parameter, each node streams its operands and its result through
main memory: GPT-2's embedding alone is 26M elements, 103 MB a tensor, and the update of GPT-2 at L=4
(39M elements) spent 180–196 ms of a ~920 ms step doing so (benchmarks/README.md, training). Over a
piece of 32K elements (128 KB a tensor), a piece's operands, intermediates and results stay in the
core's L2 cache from its first node to its last, so main memory sees θ, g, m, v read once and θ, m, v
written once. onnxruntime's sequential executor runs each piece's short chain of nodes together (its
order follows the graph's node order where nothing forces another); measured on the update alone
(39M elements, 2 threads, a loaded 2-core Xeon): 32K-element pieces 2–2.6× faster than whole tensors,
16K about the same, 8K slower again (60K nodes, each with its own overhead).

Only a family of update outputs computed elementwise from same-shaped inputs and scalars is cut (AdamW's
new θ, m, v of one parameter; SGD's new θ); anything else (a broadcast, a reduction) keeps its whole
tensors. The scalar nodes (η, the step count, bias corrections) are shared by all pieces. Elementwise
float ops round each element alone, so the pieces compute the whole graph's values bit for bit.

The pass `update_pieces` (pipeline "training-update-pieces") cuts at the graph's meta["update_chunk"] elements
(CHUNK where it says nothing; 0 cuts nothing) and records the pieces in meta["update_pieces"], for the runtime
that binds each piece to a view of its tensor's buffer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pseudoformer.ir import DType, Graph, Node, Op, TensorType
from pseudoformer.passes.pass_base import Pass, PassContext

# 32K float32 elements: 128 KB a tensor, five or six of them live at once in a 2 MB L2 (see the docstring)
CHUNK = 1 << 15

ELEMENTWISE = {Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.SQRT, Op.POW, Op.NEG, Op.MIN, Op.MAX, Op.ABS}


@dataclass(frozen=True)
class Piece:
    name: str  # the chunked graph's input or output
    whole: str  # the update graph's input or output it is a part of
    start: int  # elements [start, stop) of the whole tensor, flattened in row-major order
    stop: int


def _numel(n: Node) -> int | None:
    shape = n.type.shape
    return math.prod(shape) if all(isinstance(d, int) for d in shape) else None


def chunked_update(update: Graph, chunk: int = CHUNK) -> tuple[Graph, list[Piece]]:
    """`update` with each cuttable family of outputs larger than `chunk` elements computed piecewise (see
    the module's docstring), and the pieces: [] and `update` itself where nothing is cut."""
    nodes = update.nodes()
    # the non-scalar inputs each node depends on
    deps: dict[int, frozenset[str]] = {}
    for n in nodes:
        if n.op is Op.INPUT:
            deps[id(n)] = frozenset({n.attrs["name"]}) if n.type.rank else frozenset()
        else:
            deps[id(n)] = frozenset().union(*(deps[id(s)] for s in n.src))
    inputs = {n.attrs["name"]: n for n in update.inputs}
    # families: outputs that share an input (a parameter's θ, m and v read its gradient)
    families: list[tuple[set[str], list[str]]] = []
    for name, out in update.outputs:
        ins = set(deps[id(out)])
        joined = [f for f in families if f[0] & ins]
        for f in joined:
            families.remove(f)
            ins |= f[0]
        families.append((ins, [o for f in joined for o in f[1]] + [name]))
    outputs = dict(update.outputs)
    cut = [(ins, outs) for ins, outs in families if _cuttable(ins, outs, inputs, outputs, nodes, deps, chunk)]
    if not cut:
        return update, []
    pieces: list[Piece] = []
    new_inputs = [n for n in update.inputs if not any(n.attrs["name"] in ins for ins, _ in cut)]
    new_outputs = [(k, n) for k, n in update.outputs if not any(k in outs for _, outs in cut)]
    for ins, outs in cut:
        size = _numel(inputs[next(iter(ins))])
        assert size is not None
        for j, start in enumerate(range(0, size, chunk)):
            stop = min(start + chunk, size)
            memo: dict[int, Node] = {}
            for k in sorted(ins):
                piece = Node(Op.INPUT, (), {"name": f"{k}@{j}", "type": TensorType(DType.float32, (stop - start,))})
                memo[id(inputs[k])] = piece
                new_inputs.append(piece)
                pieces.append(Piece(f"{k}@{j}", k, start, stop))
            for k in outs:
                new_outputs.append((f"{k}@{j}", _copy(outputs[k], memo, deps)))
                pieces.append(Piece(f"{k}@{j}", k, start, stop))
    return Graph(new_inputs, new_outputs, dict(update.meta)), pieces


def _cut_update(graph: Graph, ctx: PassContext) -> tuple[Graph, bool]:
    chunk = int(graph.meta.get(CHUNK_META, CHUNK))
    if chunk <= 0:
        return graph, False
    out, pieces = chunked_update(graph, chunk)
    if not pieces:
        return graph, False
    out.meta[PIECES_META] = pieces
    return out, True


CHUNK_META, PIECES_META = "update_chunk", "update_pieces"
PASSES = [Pass("update_pieces", _cut_update, "a split step's update graph → each parameter's elementwise update "
               "once per run of 32K elements, over views of its buffers: the pieces stay in the L2 cache")]


def _cuttable(ins: set[str], outs: list[str], inputs: dict[str, Node], outputs: dict[str, Node],
              nodes: list[Node], deps: dict[int, frozenset[str]], chunk: int) -> bool:
    """Whether a family's outputs are elementwise in its inputs, all of one float32 shape larger than
    `chunk`, with nothing but scalars besides."""
    if not ins or any(k not in inputs for k in ins):
        return False
    shapes = {inputs[k].type.shape for k in ins} | {outputs[k].type.shape for k in outs}
    if len(shapes) != 1 or any(inputs[k].type.dtype is not DType.float32 for k in ins):
        return False
    size = _numel(inputs[next(iter(ins))])
    if size is None or size <= chunk:
        return False
    (shape,) = shapes
    reached = {id(n) for k in outs for n in Graph([], [("o", outputs[k])]).nodes()}
    for n in nodes:
        if id(n) not in reached or not deps[id(n)] or n.op is Op.INPUT:
            continue
        if n.op not in ELEMENTWISE or n.type.shape != shape:
            return False
        if any(deps[id(s)] and s.type.shape != shape or not deps[id(s)] and s.type.rank for s in n.src):
            return False  # a broadcast: an operand that is neither the family's shape nor a scalar
    return True


def _copy(n: Node, memo: dict[int, Node], deps: dict[int, frozenset[str]]) -> Node:
    """n over the piece's inputs (in memo); nodes that read none of the family's inputs are shared."""
    if not deps[id(n)]:
        return n
    if id(n) not in memo:
        stack = [n]
        while stack:  # iterative: a family's chain is short, but nothing bounds a graph's depth
            top = stack[-1]
            todo = [s for s in top.src if deps[id(s)] and id(s) not in memo]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            if id(top) not in memo:
                src = tuple(memo[id(s)] if deps[id(s)] else s for s in top.src)
                memo[id(top)] = Node.at(top, top.op, src, dict(top.attrs))
    return memo[id(n)]
