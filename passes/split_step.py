"""A training step cut in two for onnxruntime: a gradient graph (θ and the batch in; the loss and the
gradients out) and an update graph (η, θ, g, the optimizer state in; the new θ and state out), so that
the update can write each new value into the very buffer of the value it replaces.

Why: the one-graph step (passes/training_step.py) cannot be run in place. onnxruntime would write
`new.W` into W's buffer when its update node runs, and in one graph that node may run before a backward
product that still reads W. The step therefore held two sets of θ, m and v (six for AdamW), where torch
holds θ, its gradient, m and v once. Cut in two, the gradient graph only reads θ, and the update graph
reads θ, g, m, v and writes θ, m, v over them: four sets.

The update may run in place because each new value is written by an elementwise node after every other
reader of the value it replaces; backends/onnx/in_place.py states the conditions and checks them on each
lowered update graph (`in_place_problems`), which the runtime refuses to run in place without.
The split is derived from the one step graph the passes made, with its gradients marked as outputs
(`step_graph(..., gradient_outputs=True)`), so both halves are the same nodes the one graph has; the
gradient half is every node the loss and the gradients need, the update half every node the new values
need, with each gradient replaced by an input of its name.

Two named passes make the halves from the marked step, each in its pipeline ("training-gradient",
"training-update"; `inspect --passes` lists them): `step_gradient` and `step_update`. They share one
analysis of the step (PassContext.derived), and leave the step as it is where the split is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from pseudoformer.ir import Graph, Node, Op
from pseudoformer.passes.autodiff import GRAD
from pseudoformer.passes.pass_base import Pass, PassContext
from pseudoformer.passes.rebuild import rebuild
from pseudoformer.passes.training_step import LR, NEW, STEP


@dataclass
class SplitStep:
    gradient: Graph  # the batch and θ in; loss and grad.<name> out
    update: Graph  # lr, θ, grad.<name>, t, m, v in; new.<name> out, as the one step graph names them


def without_gradients(step: Graph) -> Graph:
    """The one step graph: the marked step without its grad.<name> outputs."""
    return Graph(list(step.inputs), [(k, n) for k, n in step.outputs if not k.startswith(GRAD)], dict(step.meta))


def halves(step: Graph, ctx: PassContext) -> SplitStep | None:
    """The split of `step` (split_step), computed once for both passes."""
    if id(step) not in ctx.derived:
        ctx.derived[id(step)] = split_step(step)
    return ctx.derived[id(step)]


def _gradient_half(graph: Graph, ctx: PassContext) -> tuple[Graph, bool]:
    split = halves(graph, ctx)
    return (graph, False) if split is None else (split.gradient, True)


def _update_half(graph: Graph, ctx: PassContext) -> tuple[Graph, bool]:
    split = halves(graph, ctx)
    return (graph, False) if split is None else (split.update, True)


PASSES = [
    Pass("step_gradient", _gradient_half, "a training step marked with its gradients → its gradient half: the batch "
         "and θ in, the loss and grad.<name> out (onnxruntime's split step)"),
    Pass("step_update", _update_half, "a training step marked with its gradients → its update half: η, θ, the "
         "gradients and the optimizer state in, new.<name> out, each written over its input's buffer"),
]


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
