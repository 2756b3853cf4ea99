"""One training step as one IR graph: parameters, optimizer state, the batch and η go in; the loss, the new
parameters and the new state come out. Every backend compiles it like a forward graph (ONNX with
standard ops only, TVM, the interpreter), and a runtime feeds each step's outputs back as the next
step's inputs.

    SGD (the paper's Algorithms 11–13):   θ ← θ − η · ∇loss(θ)
    AdamW (Loshchilov & Hutter), as torch.optim.AdamW computes it, with t counting steps from 1:
        g ← g · min(1, c / (‖g‖ + 10⁻⁶))      gradient-norm clipping over all trainable θ, if c is set
        θ ← θ · (1 − η λ)                        decoupled weight decay
        m ← m + (1 − β₁)(g − m),   v ← β₂ v + (1 − β₂) g²
        θ ← θ − η / (1 − β₁ᵗ) · m / (√v / √(1 − β₂ᵗ) + ε)
    computed as θ − s · m / (√v + ε √(1 − β₂ᵗ)) with the scalar s = η √(1 − β₂ᵗ) / (1 − β₁ᵗ): the bias
    corrections fold into scalars, one pass over the tensors fewer than dividing √v by √(1 − β₂ᵗ) (the
    update is a chain of elementwise passes over every trainable element: passes/update_chunks.py);
    m's moving average is written as torch's `lerp_` computes it.

AdamW is a built-in rather than a line of the notation: the notation has no way to declare state
shaped like a parameter group (m, v : θ) that outlives one call, nor a step counter, so a file cannot
say it; the step size schedule (warm-up, cosine) is the runtime's, since η is an input.

Names: a trainable parameter is the input of its own name (`theta.W_e`) and the output `new.theta.W_e`;
AdamW's state is `m.<name>`, `v.<name>` and the step count `t` (float32[]), each with its `new.` output;
η is the input `lr`. Frozen parameters stay PARAMs (weights the backend embeds).

After the step is built, the rules of TRAINING_STEP_RULES rewrite what the VJPs wrote where a shorter
form exists (the "training-step" pipeline of passes/manager.py): a weight's gradient summed over the
batch becomes one product over the batch's rows (rules/batched_weight_gradient.py), and that product,
transposed for a weight read transposed, is turned round (rules/transposed_product.py); its rows are
transposed before they are flattened where the product is wide (rules/transpose_then_flatten.py: the
unembedding's), so that onnxruntime transposes them once rather than for every block of the product's columns. Then a scatter-add into
zeros (a gather's or a pick's cotangent) is written into the cotangent it is added to: its sum along the scattered
axis first becomes the sum of its updates (rules/scatter_sum.py: the log-softmax's Σ ct), then the addition
becomes the scatter's data (rules/scatter_add_into.py), so that the loss's backward writes one tensor of
[batch, ℓ, N_V] where it wrote zeros, a scatter and a difference.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from pseudoformer.ir import DType, Graph, Node, Op, TensorType
from pseudoformer.ir.node import NodeBuilder
from pseudoformer.passes.autodiff import GRAD, AutodiffError, gradients, trainable_params
from pseudoformer.passes.pass_base import Pass
from pseudoformer.passes.rebuild import rebuild
from pseudoformer.passes.rules import (
    batched_weight_gradient,
    scatter_add_into,
    scatter_sum,
    transpose_then_flatten,
    transposed_product,
)

NEW = "new."
LR = "lr"
STEP = "t"
# Gradient accumulation (`accumulate=True`): the running sum acc.<name> of the micro-batches' weighted gradients
# (zeros on a step's first micro-batch) and the micro-batch's weight
ACC = "acc."
WEIGHT = "accumulate.weight"
SCALAR = TensorType(DType.float32, ())


@dataclass(frozen=True)
class Optimizer:
    """What the step computes after the gradient: `sgd`, or `adamw` with its constants; clip > 0 clips
    the gradient's global norm to it (either optimizer)."""

    kind: str = "sgd"
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.01
    clip: float = 0.0
    # False: the decay skips parameters of rank < 2 (norms' gains, biases), as HF's Trainer and nanoGPT do
    decay_all: bool = True

    def __post_init__(self) -> None:
        if self.kind not in ("sgd", "adamw"):
            raise AutodiffError(f"unknown optimizer {self.kind!r}: the optimizers are sgd and adamw")

    def state(self, name: str) -> list[str]:
        """The state inputs one trainable parameter has."""
        return [f"m.{name}", f"v.{name}"] if self.kind == "adamw" else []


def tie(graph: Graph, ties: Mapping[str, str]) -> Graph:
    """Each parameter named as a key read as the transpose of the one it names (W_u = W_eᵀ), so that training
    updates one tensor, as HF does with tie_word_embeddings."""
    if not ties:
        return graph
    memo: dict[int, Node] = {}
    owners = {p.attrs["name"]: p for p in graph.params()}
    for n in graph.nodes():
        if n.op is Op.PARAM and n.attrs["name"] in ties:
            owner = owners[ties[n.attrs["name"]]]
            memo[id(n)] = Node.at(n, Op.TRANSPOSE, (owner,), {"perm": [1, 0]})
            continue
        src = tuple(memo.get(id(s), s) for s in n.src)
        same = all(a is b for a, b in zip(src, n.src, strict=True))
        memo[id(n)] = n if same else Node.at(n, n.op, src, dict(n.attrs), type=n.type)
    return Graph(list(graph.inputs), [(k, memo[id(v)]) for k, v in graph.outputs], dict(graph.meta))


fold_batched_gradients = Pass.from_rules(
    "batched_weight_gradient", "Σ_b a_bᵀ c_b (a weight's gradient over a batch) → one product over the B·ℓ rows; "
    "(xᵀ y)ᵀ → yᵀ x (training step)", [batched_weight_gradient.RULE, transposed_product.RULE])
# After the fold: it rewrites the products the fold writes.
transpose_rows_first = Pass.from_rules(
    "transpose_then_flatten", "flatten(x)ᵀ y → flatten(transpose(x)) y for ≥ 8192 columns: onnxruntime runs a "
    "Transpose and a MatMul, not FusedMatMul(transA), which transposes A again for every block of B's columns "
    "(training step)",
    [transpose_then_flatten.RULE])
# Two walks: the second rule needs the scatter read once, which the first makes it.
fold_scatters = Pass.from_rules(
    "scatter_fold", "Σ_a scatter_add(0, i, u; a) → Σ_a u; x ± scatter_add(0, i, u) → scatter_add(±x, i, ±u) "
    "(training step)", [scatter_sum.RULE], [scatter_add_into.RULE])


class _Make(NodeBuilder):
    """The optimizer's nodes: unplaced (no source line computes them), with float32 constants."""

    def const(self, v: float, dtype: DType = DType.float32) -> Node:
        return Node(Op.CONST, (), {"value": float(v), "dtype": dtype})

    def input(self, name: str, t: TensorType) -> Node:
        return Node(Op.INPUT, (), {"name": name, "type": t})


def step_graph(graph: Graph, train: Callable[[str], bool] | Iterable[str] | None = None,
               optimizer: Optimizer | None = None, *, output: str | None = None,
               gradient_outputs: bool = False, accumulate: bool = False) -> Graph:
    """The training step of a loss graph (see the module's docstring for its inputs and outputs).
    `gradient_outputs` adds each gradient the update reads (clipped, if clipping is on) as the output
    `grad.<name>`, after the others: the marks by which passes/split_step.py cuts the step in two.

    `accumulate` (with `gradient_outputs`): the marked gradient is the running sum of several micro-batches'
    gradients, `acc.<name> + ∇ · weight`, from the scalar input `accumulate.weight` and an input `acc.<name>` per
    parameter (zeros on a step's first micro-batch); clipping and the update read that sum, so that cut in two
    (split_step.py) the gradient half runs once per micro-batch, writing the sum over its acc buffer, and the
    update half once per optimizer step (training/accumulate.py). acc is read by the sum's Add alone, not by a
    node of its own that could run before the backward and hold a copy through it."""
    opt = optimizer or Optimizer()
    names = list(trainable_params(graph, train))
    if not names:
        raise AutodiffError("nothing to train: every parameter is frozen")
    grads = gradients(graph, names, output=output)
    make = _Make()
    as_inputs: dict[str, Node] = {}

    def unfreeze(n: Node, src: tuple[Node, ...]) -> Node | None:
        if n.op is Op.PARAM and n.attrs["name"] in names:
            return as_inputs.setdefault(n.attrs["name"], make.input(n.attrs["name"], n.type))
        return None

    grads, _ = rebuild(grads, unfreeze)
    outs = dict(grads.outputs)
    lr = make.input(LR, SCALAR)
    g = {k: outs[GRAD + k] for k in names}
    inputs = [*graph.inputs, lr, *(as_inputs[k] for k in names)]
    if accumulate:
        weight = make.input(WEIGHT, SCALAR)
        acc = {k: make.input(ACC + k, as_inputs[k].type) for k in names}
        inputs += [weight, *acc.values()]
        g = {k: make(Op.ADD, acc[k], make(Op.MUL, g[k], weight)) for k in names}
    marks = g
    if opt.clip > 0:
        g = _clip(make, g, opt.clip)
        marks = marks if accumulate else g  # accumulated: the sum is marked, and clipped in the update
    outputs: list[tuple[str, Node]] = [("loss", outs["loss"])]
    if opt.kind == "sgd":
        outputs += [(NEW + k, make(Op.SUB, as_inputs[k], make(Op.MUL, lr, g[k]))) for k in names]
    else:
        t = make.input(STEP, SCALAR)
        inputs.append(t)
        new_t = make(Op.ADD, t, make.const(1.0))
        states: list[tuple[str, Node]] = []
        for k in names:
            m, v = (make.input(s, as_inputs[k].type) for s in opt.state(k))
            inputs += [m, v]
            theta, m2, v2 = _adamw(make, opt, as_inputs[k], g[k], m, v, lr, new_t)
            outputs.append((NEW + k, theta))
            states += [(NEW + m.attrs["name"], m2), (NEW + v.attrs["name"], v2)]
        outputs += [*states, (NEW + STEP, new_t)]
    if gradient_outputs:
        outputs += [(GRAD + k, marks[k]) for k in names]
    meta = {**graph.meta, "training": {"trainable": names, "optimizer": opt.kind}}
    return Graph(inputs, outputs, meta)


def _clip(make: _Make, g: dict[str, Node], c: float) -> dict[str, Node]:
    squares = [make(Op.REDUCE_SUM, make(Op.MUL, x, x), axes=list(range(x.type.rank)), keepdims=False)
               for x in g.values()]
    total = squares[0]
    for s in squares[1:]:
        total = make(Op.ADD, total, s)
    norm = make(Op.SQRT, total)
    coef = make(Op.MIN, make(Op.DIV, make.const(c), make(Op.ADD, norm, make.const(1e-6))), make.const(1.0))
    return {k: make(Op.MUL, x, coef) for k, x in g.items()}


def _adamw(make: _Make, o: Optimizer, theta: Node, g: Node, m: Node, v: Node, lr: Node, t: Node,
           ) -> tuple[Node, Node, Node]:
    one = make.const(1.0)
    decays = o.decay_all or theta.type.rank >= 2
    decayed = make(Op.MUL, theta, make(Op.SUB, one, make(Op.MUL, lr, make.const(o.weight_decay)))) if decays \
        else theta
    m2 = make(Op.ADD, m, make(Op.MUL, make(Op.SUB, g, m), make.const(1 - o.beta1)))
    v2 = make(Op.ADD, make(Op.MUL, v, make.const(o.beta2)), make(Op.MUL, make(Op.MUL, g, g), make.const(1 - o.beta2)))
    # scalars: the bias corrections 1 − β₁ᵗ and √(1 − β₂ᵗ), folded into ε and the step size
    bc1 = make(Op.SUB, one, make(Op.POW, make.const(o.beta1), t))
    bc2 = make(Op.SQRT, make(Op.SUB, one, make(Op.POW, make.const(o.beta2), t)))
    size = make(Op.DIV, make(Op.MUL, lr, bc2), bc1)
    denom = make(Op.ADD, make(Op.SQRT, v2), make(Op.MUL, make.const(o.eps), bc2))
    step = make(Op.MUL, make(Op.DIV, m2, denom), size)
    return make(Op.SUB, decayed, step), m2, v2
