"""Check a training algorithm (the paper's Algorithms 11–13) line by line; reduce it to a TrainingPlan
and the algorithm of its loss, which the ordinary elaborator turns into the loss graph.

A training algorithm is one that takes a gradient (∇). Its loops and its update run on the host, so it
is never elaborated as written. Its lines must have the shape `pseudoformer train` runs:

    for i = 1, 2, …, N_epochs do
      for n = 1, 2, …, N_data do                      (N_data, n: the dataset {x_n}_{n=1}^{N_data})
        ℓ ← length(x_n)
        for t = 1, …, ℓ do                            ┐ ETraining only: the host masks x_n
          x̃_n[t] ← mask_token or x_n[t] randomly with probability p_mask or 1 − p_mask
        end                                           │
        T̃ ← {t ∈ [ℓ] : x̃_n[t] = mask_token}           ┘
        P(θ) ← Model(x_n | θ)        or  softmax(Model(…)) for a model of logits; EDTraining: Model(z_n, x_n | θ)
        loss(θ) = −Σ_{t=1}^{ℓ−1} log P(θ)[x_n[t+1], t]      ETraining: −Σ_{t ∈ T̃} log P(θ)[x_n[t], t]
        θ ← θ − η · ∇loss(θ)
      end
    end
    return θ̂ = θ

The loss algorithm is lines ℓ, P and loss as written (positions kept, so the elaborator's messages point
into the training file), taking the dataset's sequences (and ETraining's x̃_n and T̃) as inputs and θ as
the parameters of the model. Every line that departs from the shape is reported where it is, all in one
CompileError.
"""

from __future__ import annotations

from typing import Any, Literal

from lark import Tree

from pseudoformer.base.errors import AlgError, CompileError, Pos
from pseudoformer.frontend.ast import Algorithm, Decl, Expr, Stmt, is_inference, is_training
from pseudoformer.frontend.errors import HyperparameterError, TrainingError, UnknownNameError
from pseudoformer.frontend.expressions.builtin_calls import BUILTINS
from pseudoformer.frontend.inference import key
from pseudoformer.frontend.modules import Program
from pseudoformer.frontend.names import did_you_mean, parse_name
from pseudoformer.frontend.training_loss import loss_algorithm
from pseudoformer.frontend.training_masking import check_mask_loop, check_set
from pseudoformer.frontend.training_plan import MaskingPlan, TrainingPlan

_SHAPE = ("each example's step is ℓ ← length(x_n), P(θ) ← Model(x_n | θ), loss(θ) = −Σ_{t=1}^{ℓ−1} log "
          "P(θ)[x_n[t+1], t] and θ ← θ − η · ∇loss(θ)")


def training_algorithms(prog: Program) -> list[Algorithm]:
    """The training algorithms a file defines itself."""
    return [a for a in prog.entries() if is_training(a)]


def training_hyperparameters(prog: Program) -> set[str]:
    """Config keys the file's training algorithms read (eta, N_epochs, p_mask, mask_token): a config
    or -D that sets them is not wrong for the model or the loss graph of the same file."""
    out: set[str] = set()
    for a in training_algorithms(prog):
        out |= {parse_name(d.name).ascii() for d in a.hyper}
        out.add("mask_token")
    return out


def plan_training(prog: Program, alg: Algorithm) -> TrainingPlan:
    """Check the training algorithm `alg` and say what training must do; raise CompileError with every
    mistake found."""
    return reduce_training(prog, alg)[0]


def reduce_training(prog: Program, alg: Algorithm) -> tuple[TrainingPlan, Algorithm]:
    """The plan, and the loss algorithm the elaborator builds the loss graph from."""
    check = _Check(prog, alg)
    out = check.run()
    if check.errors or out is None:
        raise CompileError(check.errors or [TrainingError(f"{alg.name} cannot be run", alg.pos)])
    return out


class _Check:
    def __init__(self, prog: Program, alg: Algorithm) -> None:
        self.prog, self.alg = prog, alg
        self.errors: list[AlgError] = []
        self.hyper = {key(d.name): d for d in alg.hyper}
        self.dataset: Decl | None = None
        self.members: dict[str, Decl] = {}  # the dataset's sequences by key: x_n (and z_n)
        self.theta: str | None = None  # θ as written
        self.lines: dict[str, Stmt] = {}  # role → the line: length, mask_loop, set, model, loss, update
        self.masked: str | None = None  # x̃_n as written
        self.funcs: dict[str, str] = {}  # P, loss (keys) → what they are ("model", "loss")
        # What the lines say, once read (None where a line is missing or wrong, and reported).
        self.mask_token: str | int | None = None
        self.p_mask: str | None = None
        self.set_name: str | None = None  # T̃ as written
        self.model: Algorithm | None = None
        self.model_output: Literal["probabilities", "logits"] = "probabilities"
        self.loss_name = "loss"  # the function the loss line defines, as written
        self.eta: str | None = None

    def error(self, msg: str, pos: Pos, cls: type[AlgError] = TrainingError, notes: tuple[str, ...] = ()) -> None:
        mod = self.alg.module
        line = mod.line(pos.line) if mod is not None and pos.file == mod.path else None
        if not any(e.pos == pos and e.message == msg for e in self.errors):
            self.errors.append(cls(msg, pos, line, notes))

    def hyper_decl(self, e: Expr, role: str, declare: str) -> Decl | None:
        d = self.hyper.get(key(e.text)) if e.op == "name" else None
        if d is None:
            what = f"{role} {e.text} is not a hyperparameter of {self.alg.name}" if e.op == "name" else \
                f"{role} must be a hyperparameter of {self.alg.name}, not a number or a formula"
            self.error(f"{what}; declare one: Hyperparameters: {declare}", e.pos, HyperparameterError)
        return d

    # ------------------------------------------------------------------ the whole algorithm
    def run(self) -> tuple[TrainingPlan, Algorithm] | None:
        self._signature()
        epochs = data_loop = ret = None
        for s in self.alg.body:
            if s.kind == "for_range" and epochs is None and ret is None:
                epochs = s
            elif s.kind == "return" and ret is None:
                ret = s
            else:
                self.error(f"{self.alg.name} is one loop over the epochs, `for i = 1, 2, …, N_epochs do`, around "
                           "one over the data, then `return θ̂ = θ`; this line is outside them", s.pos)
        if epochs is None:
            self.error(f"{self.alg.name} takes a gradient step but has no loop over the epochs "
                       "(for i = 1, 2, …, N_epochs do)", self.alg.pos)
            return None
        n_epochs = self._loop_bound(epochs, "the number of epochs", "N_epochs ∈ ℕ")
        inner = [s for s in epochs.body if s.kind == "for_range"]
        for s in epochs.body:
            if s is not (inner[0] if inner else None):
                self.error("inside the loop over the epochs comes one loop over the data, "
                           "`for n = 1, 2, …, N_data do`; this line is outside it", s.pos)
        if inner:
            data_loop = inner[0]
            self._data_loop(data_loop)
            self._step(data_loop.body)
        else:
            self.error("the loop over the epochs has no loop over the data inside it "
                       "(for n = 1, 2, …, N_data do)", epochs.pos)
        if ret is None:
            self.error(f"{self.alg.name} ends without `return θ̂ = θ`", self.alg.pos)
        else:
            self._return(ret)
        if self.errors or self.dataset is None or data_loop is None or n_epochs is None:
            return None
        return self._plan(n_epochs)

    def _signature(self) -> None:
        """Input: {x_n}_{n=1}^{N_data} (or {(z_n, x_n)}_{…}) and θ; Output: θ̂."""
        datasets = [d for d in self.alg.inputs if d.kind == "dataset"]
        if not datasets:
            self.error(f"{self.alg.name} trains on a dataset: declare it as Input: {{x_n}}_{{n=1}}^{{N_data}}, a "
                       "dataset of sequences (or {(z_n, x_n)}_{n=1}^{N_data} for pairs)", self.alg.pos)
        for d in datasets[1:]:
            self.error("a training algorithm has one dataset; this is a second", d.pos)
        if datasets:
            self.dataset = datasets[0]
            self.members = {key(m.name): m for m in self.dataset.members}
        # θ is what the gradient step updates; it is the other input, the parameters training starts from.
        update = next((s for s in _walk(self.alg.body) if s.kind == "assign" and _has(s.value, "grad")
                       and s.target.data == "target"), None)
        self.theta = str(update.target.children[0]) if update is not None else None
        theta = self.theta or "θ"
        for d in self.alg.inputs:
            if d.kind != "dataset" and key(d.name) != key(theta):
                self.error(f"besides its dataset, a training algorithm's input is {theta}, the initial parameters "
                           f"(Input: {theta}, the initial parameters)", d.pos)
        if not any(d.kind != "dataset" and key(d.name) == key(theta) for d in self.alg.inputs):
            self.error(f"{self.alg.name} updates {theta}: declare it as an input, the parameters it starts from "
                       f"(Input: {theta}, the initial parameters)", update.pos if update else self.alg.pos)
        if self.alg.params:
            self.error("θ is an input of a training algorithm, the parameters it starts from; the model's "
                       "Parameters come from the algorithm it calls (P(θ) ← Model(x_n | θ))", self.alg.params[0].pos)

    def _loop_bound(self, s: Stmt, role: str, declare: str) -> str | None:
        self._counts_from_one(s)
        d = self.hyper_decl(s.bounds[-1], role, declare)
        return parse_name(d.name).ascii() if d is not None else None

    def _counts_from_one(self, s: Stmt) -> None:
        first, second = s.bounds[:2]
        if not (first.op == "number" and first.args[0] == 1 and (second.op == "number" and second.args[0] == 2
                                                                 or second.op == "add")):
            self.error(f"the loop counts every epoch and every example once: for {s.name} = 1, 2, …, N do", s.pos)

    def _data_loop(self, s: Stmt) -> None:
        """for n = 1, 2, …, N_data do: n and N_data are the dataset's."""
        self._counts_from_one(s)
        ds = self.dataset
        if ds is None:
            return
        bound = s.bounds[-1]
        count = ds.range.dims[0].text
        if bound.op != "name" or key(bound.text) != key(count):
            self.error(f"the loop over the data runs to {count}, the size of the dataset "
                       f"{{{ds.members[0].name}}}_{{{ds.var}=1}}^{{{count}}}", bound.pos)
        if s.name is not None and key(s.name) != key(ds.var or ""):
            self.error(f"the loop over the data counts with {ds.var}, the index of the dataset's x_{ds.var}: "
                       f"for {ds.var} = 1, 2, …, {count} do", s.pos)

    # ------------------------------------------------------------------ one step
    def _step(self, body: list[Stmt]) -> None:
        order = ("length", "mask_loop", "set", "model", "loss", "update")
        seen: list[str] = []
        for s in body:
            role = self._role(s)
            if role is None:
                continue
            if role in seen:
                self.error(f"a step has one such line ({_ROLE_TEXT[role]}); this is a second", s.pos)
                continue
            if seen and order.index(role) < order.index(seen[-1]):
                self.error(f"{_ROLE_TEXT[role]} comes before {_ROLE_TEXT[seen[-1]]}: {_SHAPE}", s.pos)
            seen.append(role)
            self.lines[role] = s
        for role in ("model", "loss", "update"):
            if role not in self.lines:
                self.error(f"the step has no line {_ROLE_TEXT[role]}: {_SHAPE}", body[0].pos if body else
                           self.alg.pos)
        if ("mask_loop" in self.lines) != ("set" in self.lines):
            at = self.lines.get("mask_loop") or self.lines["set"]
            self.error("masking is two lines: x̃_n[t] ← mask_token or x_n[t] randomly with probability p_mask or "
                       "1 − p_mask (for t = 1, …, ℓ), and T̃ ← {t ∈ [ℓ] : x̃_n[t] = mask_token}", at.pos)
        if "model" in self.lines:
            self._model(self.lines["model"])
        if "loss" in self.lines:
            self._loss(self.lines["loss"])
        if "update" in self.lines:
            self._update(self.lines["update"])

    def _role(self, s: Stmt) -> str | None:
        if s.kind == "for_range":
            check_mask_loop(self, s)
            return "mask_loop"
        if s.kind == "assign" and isinstance(s.target, Tree) and s.target.data == "fn_target":
            fn = str(s.target.children[0])
            if s.value is not None and s.value.op == "call" and not self._is_builtin_of_loss(s.value):
                self.funcs[key(fn)] = "model"
                return "model"
            self.funcs[key(fn)] = "loss"
            return "loss"
        if s.kind == "assign" and s.value is not None:
            v = s.value
            if v.op == "call" and v.text == "length":
                self._length(s)
                return "length"
            if v.op == "set":
                check_set(self, s)
                return "set"
            if _has(v, "grad"):
                return "update"
        self.error(f"this line is none of a training step's: {_SHAPE}", s.pos)
        return None

    def _is_builtin_of_loss(self, v: Expr) -> bool:
        """P(θ) ← Model(…) or softmax(Model(…)) is the model's line (an unknown Model too, to say so there);
        loss(θ) = log(…), −Σ … is a loss."""
        if v.text == "softmax" and len(v.args[0]) == 1 and v.args[0][0].op == "call":
            return False
        return v.text in BUILTINS and not self.prog.lookup(self.alg.module, v.text)

    def _length(self, s: Stmt) -> None:
        args = s.value.args[0]
        if len(args) != 1 or args[0].op != "name" or key(args[0].text) not in self.members:
            self.error(f"ℓ is the length of an example: ℓ ← length({self.member_text()})", s.value.pos)

    def member_text(self) -> str:
        return self.dataset.members[-1].name if self.dataset is not None else "x_n"

    def _model(self, s: Stmt) -> None:
        """P(θ) ← Model(x_n | θ), P(θ) ← softmax(Model(x_n | θ)), EDTraining: Model(z_n, x_n | θ)."""
        self._fn_param(s)
        v = s.value
        wrapped = v.text == "softmax" and not self.prog.lookup(self.alg.module, "softmax")
        call = v.args[0][0] if wrapped else v
        found = [a for a in self.prog.lookup(self.alg.module, call.text)
                 if not is_inference(a) and not is_training(a)]
        if not found:
            names = sorted(n for n, algs in self.prog.scopes.get(self.alg.module.path, {}).items()
                           if any(not is_inference(a) and not is_training(a) for a in algs))
            self.error(f"unknown algorithm {call.text}: P(θ) is a model's output, P(θ) ← DTransformer(x_n | θ)",
                       call.pos, UnknownNameError, did_you_mean(call.text, names))
            return
        args, binds = call.args
        model = next((a for a in reversed(found) if len(a.data_args) == len(args)), None)
        if model is None:
            sig = "; ".join(f"{a.name}({', '.join(a.data_args)} | …)" for a in found)
            self.error(f"{call.text} takes {'/'.join(str(len(a.data_args)) for a in found)} sequence(s) ({sig}); "
                       f"this call gives {len(args)}", call.pos)
            return
        allowed = set(self.members) | ({key(self.masked)} if self.masked else set())
        for arg in args:
            if arg.op != "name" or key(arg.text) not in allowed:
                what = ", ".join(m.name for m in self.dataset.members) if self.dataset else "x_n"
                self.error(f"the model reads the example: give it {what}"
                           f"{' or the masked copy ' + self.masked if self.masked else ''} by name", arg.pos)
        if self.masked and not any(a.op == "name" and key(a.text) == key(self.masked) for a in args):
            self.error(f"the model reads the masked copy {self.masked}: P(θ) ← {model.name}({self.masked} | θ)",
                       call.pos)
        theta = self.theta or "θ"
        if len(binds) != 1 or binds[0].args[1] is not None or binds[0].args[0].op != "name" or \
                key(binds[0].args[0].text) != key(theta):
            self.error(f"the model takes the parameters being trained after `|`, and nothing else: "
                       f"{model.name}(… | {theta})", call.pos)
        self.model = model
        out = next(iter(model.output_decls), None)
        kind = out.type.kind if out is not None and out.type is not None else None
        self.model_output = "logits" if wrapped else "probabilities"
        if wrapped and kind in ("prob", "dist"):
            self.error(f"{model.name} returns probabilities already ({out.name} ∈ (0, 1)^{{…}}); take softmax only "
                       f"of a model that returns logits: P(θ) ← {model.name}(…)", v.pos)
        elif not wrapped and kind == "real":
            self.error(f"{model.name} returns logits ({out.name} ∈ ℝ^{{…}}), not probabilities: P(θ) ← "
                       f"softmax({model.name}({', '.join(a.text for a in args)} | {theta}))", call.pos)

    def _fn_param(self, s: Stmt) -> None:
        """P(θ), loss(θ): functions of the parameters being trained."""
        arg = s.target.children[1]
        if self.theta is not None and key(str(arg)) != key(self.theta):
            self.error(f"{s.target.children[0]}({arg}) is a function of the parameters being trained, "
                       f"{self.theta}", arg.pos)

    def _loss(self, s: Stmt) -> None:
        """loss(θ) = …: kept for the elaborator; here only what it refers to."""
        self._fn_param(s)
        self.loss_name = str(s.target.children[0])
        if _has(s.value, "grad"):
            self.error("the loss cannot take a gradient itself; the update line does: θ ← θ − η · ∇loss(θ)",
                       s.value.pos)

    def _update(self, s: Stmt) -> None:
        """θ ← θ − η · ∇loss(θ): SGD with the step size η."""
        theta = self.theta or "θ"
        tgt = s.target
        v = s.value
        good_target = tgt.data == "target" and len(tgt.children) == 1 and key(str(tgt.children[0])) == key(theta)
        step = v.args[1] if v.op == "sub" and v.args[0].op == "name" and key(v.args[0].text) == key(theta) else None
        eta = grad = None
        if step is not None and step.op in ("matmul", "juxt") and step.args[1].op == "grad":
            eta, grad = step.args
        if not good_target or grad is None:
            self.error(f"the update is a gradient step on the parameters: {theta} ← {theta} − η · ∇loss({theta})",
                       s.pos)
            return
        d = self.hyper_decl(eta, "the step size", "η ∈ (0, ∞)")
        self.eta = parse_name(d.name).ascii() if d is not None else None
        if d is not None and (d.type is None or d.type.kind != "real"):
            self.error(f"the step size {d.name} is a real number: declare {d.name} ∈ (0, ∞)", d.pos,
                       HyperparameterError)
        g = grad.args[0]
        loss = self.loss_name
        if g.op != "call" or key(g.text) != key(loss) or len(g.args[0]) != 1 or g.args[0][0].op != "name" or \
                key(g.args[0][0].text) != key(theta) or g.args[1]:
            self.error(f"the gradient is that of the loss defined above, at the parameters: ∇{loss}({theta})", g.pos)

    def _return(self, s: Stmt) -> None:
        theta = self.theta or "θ"
        if s.value.op != "name" or key(s.value.text) != key(theta):
            out = self.alg.outputs[0] if self.alg.outputs else "θ̂"
            self.error(f"a training algorithm returns the trained parameters: return {out} = {theta}", s.value.pos)

    # ------------------------------------------------------------------ the plan
    def _plan(self, epochs: str) -> tuple[TrainingPlan, Algorithm] | None:
        model, eta = self.model, self.eta
        if model is None or eta is None or self.theta is None or self.dataset is None:
            return None
        ds = self.dataset
        var = frozenset([ds.var]) if ds.var else frozenset()

        def api(name: str) -> str:  # the loss graph's input: x_n → x, x̃_n → x_tilde
            return parse_name(name).ascii(var)

        masking = None
        loss_alg = loss_algorithm(self, model)
        if self.masked is not None:
            assert self.p_mask is not None and self.mask_token is not None and self.set_name is not None
            masking = MaskingPlan(probability=self.p_mask, mask_token=self.mask_token,
                                  masked_input=api(self.masked), target_input=api(ds.members[-1].name),
                                  positions_input=api(self.set_name))
        plan = TrainingPlan(
            algorithm=self.alg.name, model=model.name, model_output=self.model_output,
            theta=parse_name(self.theta).ascii(), data=tuple(api(m.name) for m in ds.members),
            loss_inputs=tuple(api(a) for a in loss_alg.data_args), loss_output=loss_alg.outputs[0],
            loss="masked" if masking else "next_token", masking=masking, optimizer="sgd", learning_rate=eta,
            epochs=epochs, data_count=parse_name(ds.range.dims[0].text).ascii(), pos=self.alg.pos)
        return plan, loss_alg


_ROLE_TEXT = {"length": "ℓ ← length(x_n)", "mask_loop": "the masking loop (for t = 1, …, ℓ do)",
              "set": "T̃ ← {t ∈ [ℓ] : x̃_n[t] = mask_token}", "model": "P(θ) ← Model(x_n | θ)",
              "loss": "loss(θ) = …", "update": "θ ← θ − η · ∇loss(θ)"}


def _walk(stmts: list[Stmt]) -> Any:
    for s in stmts:
        yield s
        yield from _walk(s.body)


def _has(x: Any, op: str) -> bool:
    if isinstance(x, Expr):
        return x.op == op or _has(x.args, op)
    if isinstance(x, (tuple, list)):
        return any(_has(y, op) for y in x)
    return False


__all__ = ["plan_training", "reduce_training", "training_algorithms",
           "training_hyperparameters"]
