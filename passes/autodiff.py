"""Reverse-mode autodiff on the IR: the gradient of a loss graph with respect to some of its parameters.

The loss graph is what the frontend makes of a loss algorithm: one output, the loss per example
(float32[batch]) or one number, with the model's weights as PARAM nodes. `gradients` returns a graph
whose outputs are the objective (the mean of the loss over the batch) and ∂objective/∂θ for each
trainable θ, as more IR, so every backend runs the backward pass as it runs the forward one.

Each op's VJP is the `vjp` of its OpDef (ir/ops/*, helpers in ir/ops/cotangents.py). A fused op without
one (attention, the norms, SwiGLU, rotary, the quantized product) is differentiated through its
`decompose` formula: the formula is built on the op's operands and backpropagated locally. Only nodes
that lie on a path from a trainable parameter to the loss get any backward work: a frozen parameter
(LoRA's base weights) and everything that reads only frozen ones get none, since a cotangent is made
only for a node that needs one.

The gradient of a block-quantized weight is refused by name (its integers have none and its scales are
not trained); a frozen quantized product still passes cotangents to its input through its formula.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pseudoformer.base.errors import UsageError
from pseudoformer.ir import Graph, Node, Op
from pseudoformer.ir.node import NodeBuilder
from pseudoformer.ir.ops import op_def
from pseudoformer.ir.ops.cotangents import zeros_like
from pseudoformer.ir.types import TensorType, TupleType

GRAD = "grad."  # the prefix of a gradient output's name: grad.<parameter name>
QUANTIZED = (Op.MATMUL_NBITS, Op.GATHER_NBITS)


class AutodiffError(UsageError):
    """A gradient that cannot be taken: a quantized weight asked to train, an op without a derivative."""


def _differentiable(n: Node) -> bool:
    # a tuple (cached attention's) counts, so that a loss that reads one reaches _vjp and is refused there
    return isinstance(n.type, TupleType) or n.dtype.is_float


def _needing(roots: list[Node], sources: set[int], stop: set[int]) -> tuple[list[Node], set[int]]:
    """The nodes of the roots' graph (not walking past `stop`), in topological order, and those that
    depend on a source: the only ones a cotangent is made for."""
    order: list[Node] = []
    seen: set[int] = set()
    for r in roots:
        stack: list[tuple[Node, bool]] = [(r, False)]
        while stack:
            n, done = stack.pop()
            if done:
                order.append(n)
                continue
            if id(n) in seen:
                continue
            seen.add(id(n))
            stack.append((n, True))
            if id(n) not in stop:
                stack.extend((s, False) for s in reversed(n.src) if id(s) not in seen)
    needs: set[int] = set()
    for n in order:
        if _differentiable(n) and (id(n) in sources or (id(n) not in stop and any(id(s) in needs for s in n.src))):
            needs.add(id(n))
    return order, needs


def backprop(roots: list[tuple[Node, Node]], sources: Iterable[Node], make: NodeBuilder,
             stop: Iterable[Node] = ()) -> dict[int, Node]:
    """Cotangents of `sources` (id → node) given each root's; `stop` nodes are leaves (a formula's operands)."""
    source_ids = {id(s) for s in sources}
    stop_ids = {id(s) for s in stop} | source_ids
    order, needs = _needing([r for r, _ in roots], source_ids, stop_ids)
    cts: dict[int, Node] = {}
    for r, ct in roots:
        _accumulate(cts, r, ct, make)
    for n in reversed(order):
        ct = cts.get(id(n))
        if ct is None or id(n) in stop_ids or id(n) not in needs:
            continue
        make.like = n
        for s, c in zip(n.src, _vjp(n, ct, make), strict=True):
            if c is not None and id(s) in needs:
                _accumulate(cts, s, c, make)
    return {k: v for k, v in cts.items() if k in source_ids}


def _accumulate(cts: dict[int, Node], n: Node, ct: Node, make: NodeBuilder) -> None:
    if ct.type != n.type:
        raise AssertionError(f"a cotangent of {ct.type} for {n.op.value} of {n.type}: a VJP rule is wrong")
    prev = cts.get(id(n))
    cts[id(n)] = ct if prev is None else make(Op.ADD, prev, ct)


def _vjp(n: Node, ct: Node, make: NodeBuilder) -> tuple[Node | None, ...]:
    if n.op is Op.GET:
        n = n.src[0]
    d = op_def(n.op)
    if d.vjp is not None:
        try:
            return tuple(d.vjp(n, ct, make))
        except NotImplementedError as e:  # a form of the op its rule does not cover
            raise AutodiffError(f"no derivative yet for {e}{f' ({n.span})' if n.span else ''}") from None
    if d.decompose is not None and isinstance(n.type, TensorType):
        formula = d.decompose(n, make)
        wanted = [s for s in n.src if _differentiable(s)]
        got = backprop([(formula, ct)], wanted, make, stop=n.src)
        # an operand in several slots (self-attention's q = k = v) has its whole cotangent once
        return tuple(got.pop(id(s), None) for s in n.src)
    where = f" ({n.span})" if n.span else ""
    raise AutodiffError(f"{n.op.value} has no derivative{where}: it appears only in inference graphs")


def _refuse_quantized(order: list[Node], needs: set[int], trainable: dict[str, list[Node]]) -> None:
    """Name the trainable parameters a quantized op reads as a weight (its operands after the input)."""
    for n in order:
        if n.op not in QUANTIZED:
            continue
        weights = n.src[1:] if n.op is Op.MATMUL_NBITS else [s for i, s in enumerate(n.src) if i != 1]
        for w in weights:
            hit = sorted({p.attrs["name"] for p in w.walk() if p.op is Op.PARAM and p.attrs["name"] in trainable})
            if hit:
                raise AutodiffError(f"cannot train the block-quantized weight {', '.join(map(repr, hit))}: "
                                    "its integers have no gradient; freeze it (train other parameters) "
                                    "or train the float model")


def trainable_params(graph: Graph, train: Callable[[str], bool] | Iterable[str] | None = None) -> dict[str, list[Node]]:
    """The PARAM nodes to differentiate, by name (one name may have several nodes): every float one, or
    those `train` names or accepts."""
    if train is not None and not callable(train):
        names = set(train)
        known = {p.attrs["name"] for p in graph.params()}
        unknown = sorted(names - known)
        if unknown:
            raise AutodiffError(f"no parameter named {', '.join(map(repr, unknown))} in the model")
        train = names.__contains__
    out: dict[str, list[Node]] = {}
    for n in graph.nodes():
        if n.op is Op.PARAM and _differentiable(n) and (train is None or train(n.attrs["name"])):
            out.setdefault(n.attrs["name"], []).append(n)
    return out


def objective(graph: Graph, output: str | None = None) -> Node:
    """The number training minimises: the loss output's mean over the batch (itself if one number)."""
    outs = dict(graph.outputs)
    name = output or graph.outputs[0][0]
    loss = outs[name]
    if not isinstance(loss.type, TensorType) or not loss.dtype.is_float or loss.type.rank > 1:
        raise AutodiffError(f"the loss {name!r} is {loss.type}: training needs one number per example "
                            "(float32[batch]) or one number: train a model through the paper's training algorithm "
                            "(`pseudoformer train MODEL.alg` without --entry derives it), or write a loss algorithm "
                            "(docs/training.md)")
    if loss.type.rank == 0:
        return loss
    return Node.at(loss, Op.REDUCE_MEAN, (loss,), {"axes": [0], "keepdims": False})


def gradients(graph: Graph, train: Callable[[str], bool] | Iterable[str] | None = None, *,
              output: str | None = None, inputs: Iterable[str] = ()) -> Graph:
    """A graph of the same inputs and params with outputs `loss` (the objective) and `grad.<name>` for each
    trainable parameter, in the order the model first uses them, then for each float input named in `inputs`."""
    params = trainable_params(graph, train)
    params.update({n.attrs["name"]: [n] for n in graph.inputs if n.attrs["name"] in set(inputs)})
    loss = objective(graph, output)
    nodes = [n for ns in params.values() for n in ns]
    order, needs = _needing([loss], {id(n) for n in nodes}, {id(n) for n in nodes})
    _refuse_quantized(order, needs, params)
    make = NodeBuilder()
    cts = backprop([(loss, make.const(1.0, loss.dtype))], nodes, make)
    outputs: list[tuple[str, Node]] = [("loss", loss)]
    for name, ns in params.items():
        make.like = ns[0]
        parts = [cts[id(n)] for n in ns if id(n) in cts]
        g = parts[0] if parts else zeros_like(make, ns[0])
        for p in parts[1:]:
            g = make(Op.ADD, g, p)
        outputs.append((GRAD + name, g))
    return Graph(inputs=list(graph.inputs), outputs=outputs, meta=dict(graph.meta))
