"""A training step cut in two for onnxruntime: a gradient graph (θ and the batch in; the loss and the
gradients out) and an update graph (η, θ, g, the optimizer state in; the new θ and state out), so that
the update can write each new value into the very buffer of the value it replaces.

Why: the one-graph step (passes/training_step.py) cannot be run in place. onnxruntime would write
`new.W` into W's buffer when its update node runs, and in one graph that node may run before a backward
product that still reads W. The step therefore held two sets of θ, m and v (six for AdamW), where torch
holds θ, its gradient, m and v once. Cut in two, the gradient graph only reads θ, and the update graph
reads θ, g, m, v and writes θ, m, v over them: four sets.

Why the update in place is safe (checked on each update graph by `in_place_problems`, which the runtime
refuses to run without): onnxruntime runs a graph's nodes one at a time in a topological order (the
sequential executor), and the update session is built with its graph optimizations off, so the nodes it
runs are the ONNX nodes checked here. For each pair (input X, output new.X) bound to one buffer:
- every node that reads X, other than the node W that writes new.X, is an ancestor of W, so it has run
  before W in every topological order, whichever one onnxruntime picks;
- W is elementwise (Add, Sub, Mul, Div, …), and where it reads X itself, X has W's output's shape: it
  reads element i before it writes element i (onnxruntime's own planner reuses an input's buffer for
  these kernels' output, MayInplace);
- no node after W reads X (they read new.X, the value now in the buffer, which is what they mean).
The split is derived from the one step graph the passes made, with its gradients marked as outputs
(`step_graph(..., gradient_outputs=True)`), so both halves are the same nodes the one graph has; the
gradient half is every node the loss and the gradients need, the update half every node the new values
need, with each gradient replaced by an input of its name.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from pseudoformer.ir import Graph, Node, Op
from pseudoformer.passes.autodiff import GRAD
from pseudoformer.passes.rebuild import rebuild
from pseudoformer.passes.training_step import LR, NEW, STEP


@dataclass
class SplitStep:
    gradient: Graph  # the batch and θ in; loss and grad.<name> out
    update: Graph  # lr, θ, grad.<name>, t, m, v in; new.<name> out, as the one step graph names them


def without_gradients(step: Graph) -> Graph:
    """The one step graph: the marked step without its grad.<name> outputs."""
    return Graph(list(step.inputs), [(k, n) for k, n in step.outputs if not k.startswith(GRAD)], dict(step.meta))


def split_step(step: Graph) -> SplitStep | None:
    """The two halves of a step marked with its gradients, or None where the update half would read
    more than η, θ, the gradients and the optimizer state (it then stays one graph)."""
    grads = {id(n): k for k, n in step.outputs if k.startswith(GRAD)}
    if not grads:
        return None
    carried = [k[len(NEW):] for k, _ in step.outputs if k.startswith(NEW)]
    theta = step.meta["training"]["trainable"]
    gradient = Graph([n for n in step.inputs if n.attrs["name"] not in {LR, STEP, *carried} - set(theta)],
                     [(k, n) for k, n in step.outputs if k == "loss" or k.startswith(GRAD)], dict(step.meta))
    as_inputs: dict[str, Node] = {}

    def cut(n: Node, src: tuple[Node, ...]) -> Node | None:
        if id(n) not in grads:
            return None
        name = grads[id(n)]
        return as_inputs.setdefault(name, Node(Op.INPUT, (), {"name": name, "type": n.type}))

    marked = Graph(list(step.inputs), [(k, n) for k, n in step.outputs if k.startswith(NEW)], dict(step.meta))
    rebuilt, _ = rebuild(marked, cut)
    allowed = {LR, *carried, *(GRAD + k for k in theta)}
    reached = [n for n in Graph([], rebuilt.outputs).nodes() if n.op in (Op.INPUT, Op.PARAM)]
    if any(n.op is Op.PARAM or n.attrs["name"] not in allowed for n in reached):
        return None
    order = [LR, *theta, *(GRAD + k for k in theta), *(k for k in carried if k not in theta)]
    names = {n.attrs["name"]: n for n in reached}
    inputs = [names[k] for k in order if k in names]
    return SplitStep(gradient, Graph(inputs, rebuilt.outputs, dict(step.meta)))


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
