"""Whether an update graph may write its outputs over its inputs' buffers (onnxruntime's split training step).

The split step (passes/split_step.py) binds each new.X output of its update graph to X's own buffer. That is
safe where onnxruntime runs the graph's nodes one at a time in a topological order (the sequential executor,
with graph optimizations off, so the nodes it runs are the ONNX nodes checked here) and, for each pair (input
X, output new.X) bound to one buffer:
- every node that reads X, other than the node W that writes new.X, is an ancestor of W, so it has run
  before W in every topological order, whichever one onnxruntime picks;
- W is elementwise (Add, Sub, Mul, Div, …), and where it reads X itself, X has W's output's shape: it
  reads element i before it writes element i (onnxruntime's own planner reuses an input's buffer for
  these kernels' output, MayInplace);
- no node after W reads X (they read new.X, the value now in the buffer, which is what they mean).
It reads the lowered ModelProto, not the IR: what onnxruntime runs is what must be safe.
"""

from __future__ import annotations

import onnx


class InPlaceError(Exception):
    """An update graph that cannot safely write its outputs over its inputs."""


# ONNX ops that compute each output element from the same element of their inputs (scalars broadcast)
ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Sqrt", "Pow", "Min", "Max", "Neg", "Abs", "Reciprocal", "Identity"}


def in_place_problems(model: onnx.ModelProto, pairs: dict[str, str]) -> list[str]:
    """Why running `model` with each output of `pairs` ({output: input}) bound to its input's buffer would
    not be safe (see the module's docstring); [] where it is."""
    nodes = list(model.graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output}
    ancestors: dict[int, set[int]] = {}

    def above(i: int) -> set[int]:
        if i not in ancestors:
            seen: set[int] = set()
            stack = [producer[x] for x in nodes[i].input if x in producer]
            while stack:
                j = stack.pop()
                if j not in seen:
                    seen.add(j)
                    stack.extend(producer[x] for x in nodes[j].input if x in producer)
            ancestors[i] = seen
        return ancestors[i]

    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*model.graph.input, *model.graph.output]}
    readers: dict[str, list[int]] = {}  # indexed once: a chunked update has tens of thousands of nodes
    for i, n in enumerate(nodes):
        for x in dict.fromkeys(n.input):
            readers.setdefault(x, []).append(i)
    problems = []
    for out, src in pairs.items():
        if out not in producer:
            problems.append(f"{out} is not computed by a node")
            continue
        w = producer[out]
        if nodes[w].op_type not in ELEMENTWISE:
            problems.append(f"{out} is written by a {nodes[w].op_type}, not an elementwise op")
        if src in nodes[w].input and shapes.get(src) != shapes.get(out):
            problems.append(f"{out}'s writer reads {src} broadcast")
        for i in readers.get(src, []):
            n = nodes[i]
            if i != w and i not in above(w):
                problems.append(f"{n.op_type} {n.name or i} reads {src} but need not run before {out} is written")
    return problems
