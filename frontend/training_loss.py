"""The loss algorithm of a training algorithm: its lines ℓ, P and loss, as an ordinary algorithm.

For DTraining (Algorithm 13) over DTransformer it is, with the training file's own statements:

    Algorithm: loss ← DTraining(x_n | θ)
      Input: x_n ∈ V*
      Output: loss ∈ ℝ
      Parameters: θ : DTransformer
      3 ℓ ← length(x_n)
      4 P ← DTransformer(x_n | θ)                           P(θ) ← …: P as a function of θ is P
      5 return loss = −Σ_{t=1}^{ℓ−1} log P[x_n[t+1], t]       loss(θ) = …: the value returned

ETraining (Algorithm 12) takes the masked copy x̃_n, the example x_n (one length with x̃_n) and the
masked positions T̃ ∈ ℝ^{length(x_n)} (1 in T̃, 0 elsewhere) as inputs, and its Σ_{t ∈ T̃} f(t) is
Σ_{t=1}^{ℓ} T̃[t] · f(t), ℓ the bound of T̃'s set {t ∈ [ℓ] : …}. The elaborator builds the graph of this
algorithm as of any other, so the loss is exactly the line the file writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from lark import Tree

from pseudoformer.base.errors import CompileError, Pos
from pseudoformer.frontend.ast import Algorithm, Decl, Expr, Stmt, Type
from pseudoformer.frontend.errors import TrainingError
from pseudoformer.frontend.names import parse_name
from pseudoformer.frontend.training_plan import TrainingPlan
from pseudoformer.ir import Graph


def loss_algorithm(check: Any, model: Algorithm) -> Algorithm:
    """`check` is training._Check after a clean run: its lines, names and dataset."""
    alg = check.alg
    ds = check.dataset
    lines: dict[str, Stmt] = check.lines
    theta = check.theta
    seqs = [m.name for m in ds.members]
    vocab = Type("vocab", (), True, ds.pos)
    inputs = [Decl("typed", m.name, m.pos, type=vocab) for m in ds.members]
    data_args = list(seqs)
    same_length: tuple[str, ...] = ()
    sets: dict[str, Expr] = {}
    if check.masked is not None:
        target = ds.members[-1]
        set_line = lines["set"]
        masked_pos = lines["mask_loop"].body[0].target.children[0]
        # The masked copy first (what the model reads), then the example and the masked positions.
        inputs = [Decl("typed", check.masked, _tok_pos(masked_pos, set_line), type=vocab), *inputs,
                  Decl("typed", check.set_name, set_line.pos,
                       type=Type("real", (_length(target.name, set_line.pos),), False, set_line.pos))]
        data_args = [check.masked, *seqs, check.set_name]
        same_length = (check.masked, target.name)
        sets[parse_name(check.set_name).key()] = set_line.value.args[1]  # T̃ ⊆ [ℓ]: the bound its Σ runs to
    funcs = {k for k, role in check.funcs.items() if role == "model"}
    body = [s for s in (lines.get("length"), _model_line(lines["model"], funcs)) if s is not None]
    loss = lines["loss"]
    out = "loss"
    body.append(Stmt("return", loss.pos, loss.number, name=out, value=_loss_value(loss.value, funcs, sets)))
    return Algorithm(name=alg.name, label=alg.label, pos=alg.pos, outputs=[out], data_args=data_args,
                     param_args=[theta], inputs=inputs,
                     output_decls=[Decl("typed", out, loss.pos, type=Type("real", (), False, loss.pos))],
                     params=[Decl("alg_group", theta, alg.pos, alg=model.name)], hyper=[], body=body,
                     module=alg.module, same_length=same_length)


def _tok_pos(tok: Any, fallback: Stmt) -> Any:
    return getattr(tok, "pos", fallback.pos)


def _length(name: str, pos: Any) -> Expr:
    return Expr("call", ((Expr("name", (), pos, name),), ()), pos, "length")


def _model_line(s: Stmt, funcs: set[str]) -> Stmt:
    """P(θ) ← … assigns P."""
    fn = s.target.children[0]
    return replace(s, target=Tree("target", [fn]), value=_unfunction(s.value, funcs))


def _loss_value(e: Expr, funcs: set[str], sets: dict[str, Expr]) -> Expr:
    def over_sets(x: Expr) -> Expr:
        if x.op != "sum_over_set":
            return x
        var, members, body = x.args
        # A set the file never defines has no bound: the elaborator reports its name as unknown.
        bound = sets.get(parse_name(members.text).key())
        at_t = Expr("index", (members, (Expr("name", (), x.pos, var),)), members.pos)
        one = Expr("number", (1,), x.pos, "1") if bound is not None else None
        return Expr("sum", (var, one, bound, Expr("matmul", (at_t, body), x.pos)), x.pos)

    return _rewrite(_unfunction(e, funcs), over_sets)


def _unfunction(e: Expr, funcs: set[str]) -> Expr:
    """P(θ)[…] is P[…]: the model's output, a function of θ, at the θ being trained."""
    def drop(x: Expr) -> Expr:
        if x.op == "call" and parse_name(x.text).key() in funcs and not x.args[1]:
            return Expr("name", (), x.pos, x.text)
        return x

    return _rewrite(e, drop)


def _rewrite(x: Any, fn: Callable[[Expr], Expr]) -> Any:
    """Rebuild an expression bottom-up, `fn` applied to every node."""
    if isinstance(x, Expr):
        return fn(Expr(x.op, _rewrite(x.args, fn), x.pos, x.text))
    if isinstance(x, tuple):
        return tuple(_rewrite(y, fn) for y in x)
    return x


def finish_loss_graph(graph: Graph, plan: TrainingPlan, loss_alg: Algorithm) -> None:
    """Name the loss graph's interface as the plan does, and check that the loss is one number per example.

    Its parameters take the model's own names (θ.W_e → W_e): θ is all of the model's parameters, so the
    model's checkpoints and initialisations fit the loss graph as they fit the model's graph. Its inputs
    drop the example index (x_n → x)."""
    loss_line = loss_alg.body[-1]
    (_, out), = graph.outputs
    if out.type.rank != 1:
        shape = " × ".join(str(d) for d in out.type.shape[1:])
        raise CompileError([TrainingError(f"the loss is one number per example, and this one is ℝ^{{{shape}}}; sum "
                                          "it over the positions, as −Σ_{t=1}^{ℓ−1} log P(θ)[x_n[t+1], t] does",
                                          loss_line.value.pos, _line(loss_alg, loss_line.pos))])
    prefix = f"{plan.theta}."
    for p in graph.params():
        name = p.attrs["name"]
        if name.startswith(prefix):
            p.attrs["name"] = name[len(prefix):]
    # the data's inputs; a model's random draws (frontend/draws.py) come after them, named draw_<k>
    for node, name in zip(graph.inputs[:len(plan.loss_inputs)], plan.loss_inputs, strict=True):
        node.attrs["name"] = name
    graph.meta["training"] = plan.algorithm


def _line(alg: Algorithm, pos: Pos) -> str | None:
    mod = alg.module
    return mod.line(pos.line) if mod is not None and pos.file == mod.path else None
