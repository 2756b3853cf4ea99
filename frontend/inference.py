"""Check an inference algorithm (the paper's Algorithms 14 and 15) line by line; reduce it to a GenerationPlan.

An inference algorithm is one whose body samples (`sample a token y from q ∝ p^{1/τ}`). It is a loop
on the host around a model, not one dataflow graph, so it is never elaborated. Instead its lines
must have the shape that `pseudoformer generate` runs:

    ℓ ← length(x)                    or   x̂ ← [bos_token];  y ← 0            (before the loop)
    for i = 1, 2, …, ℓ_gen do        or   while y ≠ eos_token [∧ length(x̂) ≤ ℓ_gen] do
      P ← Model(…, x | θ̂)            or   P ← softmax(Model(…, x | θ̂)), for a model of logits
      p ← P[:, ℓ + i − 1]                  the column of the last token of x
      sample a token y from q ∝ p^{1/τ}
      x ← [x, y]
    end
    return y = x[ℓ + 1 : ℓ + ℓ_gen]  or   return x̂

Every line that departs from it is reported where it is, all in one CompileError.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pseudoformer.base.errors import AlgError, CompileError, Pos
from pseudoformer.frontend.ast import Algorithm, Decl, Expr, Stmt, is_inference
from pseudoformer.frontend.errors import HyperparameterError, InferenceError, UnknownNameError
from pseudoformer.frontend.generation_plan import GenerationPlan
from pseudoformer.frontend.inference_steps import Step, check_loop
from pseudoformer.frontend.modules import Program
from pseudoformer.frontend.names import parse_name, unicode_name
from pseudoformer.frontend.positions import Form


def inference_algorithms(prog: Program) -> list[Algorithm]:
    """The inference algorithms a file defines itself (those it `use`s are not its own)."""
    return [a for a in prog.entries() if is_inference(a)]


def inference_hyperparameters(prog: Program) -> set[str]:
    """The config keys the inference algorithms of the file and of the files it uses declare (tau,
    ell_gen, …): a config or -D that sets them is not wrong when it is applied to the model of the same
    file, nor to a training algorithm over that model (gpt2.toml for gpt2_dtraining.alg)."""
    return {parse_name(d.name).ascii() for m in prog.modules.values() for a in m.algorithms if is_inference(a)
            for d in a.hyper}


def find_inference(prog: Program, entry: str | None = None) -> Algorithm:
    """The inference algorithm named `entry` (a name, a label, `Algorithm 14`), or the file's only one."""
    algs = prog.entries()
    path = prog.root.path
    if entry is None:
        found = inference_algorithms(prog)
        if len(found) == 1:
            return found[0]
        if not found:
            raise CompileError([UnknownNameError(f"{path} has no inference algorithm (one that samples tokens, "
                                                 "as Algorithm 14 DInference does)")])
        names = ", ".join(a.name for a in found)
        raise CompileError([UnknownNameError(f"{path} has several inference algorithms ({names}); pick one "
                                             "with generate --inference NAME (inference= in the API)")])
    hits = [a for a in algs if entry in (a.name, a.label, f"Algorithm {a.label}")]
    if len(hits) != 1:
        what = "no" if not hits else "more than one"
        raise CompileError([UnknownNameError(f"{path} has {what} algorithm {entry!r}; its inference algorithms "
                                             f"are {', '.join(a.name for a in inference_algorithms(prog)) or 'none'}")])
    if not is_inference(hits[0]):
        raise CompileError([UnknownNameError(f"{hits[0].name} is not an inference algorithm: it does not sample "
                                             "tokens (sample a token y from q ∝ p^{1/τ})")])
    return hits[0]


def plan_inference(prog: Program, entry: str | None = None) -> GenerationPlan:
    """Check the inference algorithm `entry` of `prog` and say what generation must do; raise
    CompileError with every mistake found."""
    alg = find_inference(prog, entry)
    check = _Check(prog, alg)
    plan = check.run()
    if check.errors or plan is None:
        raise CompileError(check.errors or [InferenceError(f"{alg.name} cannot be run", alg.pos)])
    return plan


class _Check:
    """The lines before the loop, the loop's own line, and the return; inference_steps checks the
    four lines of a step."""

    def __init__(self, prog: Program, alg: Algorithm) -> None:
        self.prog, self.alg = prog, alg
        self.errors: list[AlgError] = []
        # Hyperparameters match by their ASCII names, as sizes and config keys do (ℓ_gen = ell_gen).
        self.hyper = {parse_name(d.name).ascii(): d for d in alg.hyper}
        self.params = {key(d.name): d for d in alg.params}
        self.inputs = {key(a): a for a in alg.data_args}
        self.texts = dict(self.inputs)  # every sequence's name as written, for messages
        self.lengths: dict[str, tuple[str, Form]] = {}  # ℓ ← length(x): ℓ → (its text, its form)
        self.starts: dict[str, str | None] = {}  # x̂ ← [bos_token]: x̂ → the ASCII name of bos_token
        self.tokens: set[str] = set()  # y ← 0

    def error(self, cls: type[AlgError], msg: str, pos: Pos, notes: tuple[str, ...] = ()) -> None:
        mod = self.alg.module
        line = mod.line(pos.line) if mod is not None and pos.file == mod.path else None
        err = cls(msg, pos, line, notes)
        if not any(e.pos == pos and e.message == msg for e in self.errors):
            self.errors.append(err)

    def hyper_decl(self, e: Expr, role: str, declare: str) -> Decl | None:
        """The hyperparameter `e` names, or an error that says how to declare one: the config and
        `pseudoformer generate` set hyperparameters, so what generation varies must be one."""
        d = self.hyper.get(parse_name(e.text).ascii()) if e.op == "name" else None
        if d is None:
            what = f"{role} {e.text} is not a hyperparameter of {self.alg.name}" if e.op == "name" else \
                f"{role} must be a hyperparameter of {self.alg.name}, not a number or a formula"
            self.error(HyperparameterError, f"{what}; declare one: Hyperparameters: {declare}", e.pos)
        return d

    # ------------------------------------------------------------------ the whole algorithm
    def run(self) -> GenerationPlan | None:
        self._signature()
        loop: Stmt | None = None
        ret: Stmt | None = None
        for s in self.alg.body:
            if ret is not None:
                self.error(InferenceError, "nothing may follow the return of an inference algorithm", s.pos)
            elif s.kind in ("for_range", "while"):
                if loop is not None:
                    self.error(InferenceError, "an inference algorithm has one generation loop; this is a second",
                               s.pos)
                else:
                    loop = s
            elif s.kind == "return":
                ret = s
            elif loop is None and s.kind != "sample":
                self._before(s)
            else:
                what = "samples outside the generation loop" if s.kind == "sample" else \
                    "does nothing after its loop but return"
                self.error(InferenceError, f"{self.alg.name} {what}: each step of `for i = 1, 2, …, ℓ_gen do` or "
                           "`while y ≠ eos_token do` calls the model, takes p, samples y and appends it", s.pos)
        if loop is None:
            if not self.errors:
                self.error(InferenceError, f"{self.alg.name} samples but has no generation loop (for i = 1, 2, …, "
                           "ℓ_gen do, or while y ≠ eos_token do)", self.alg.pos)
            return None
        step = check_loop(self, loop)
        if ret is None:
            self.error(InferenceError, f"{self.alg.name} ends without `return`: return the generated tokens "
                       "(return y = x[ℓ + 1 : ℓ + ℓ_gen]) or the whole sequence (return x̂)", self.alg.pos)
            return None
        if step is None:
            return None
        returns = self._return(ret, step)
        if returns is None or step.temperature is None or self.errors:
            return None
        return GenerationPlan(algorithm=self.alg.name, model=step.model.name, encoder_input=step.encoder_input,
                              model_output=step.model_output, temperature=step.temperature,
                              max_new_tokens=step.max_new_tokens, bos_token=self.starts.get(step.seq),
                              eos_token=step.eos_token, returns=returns, pos=self.alg.pos)

    def _signature(self) -> None:
        """Inputs and output are token sequences: the prompt (x, or z for an encoder) and the tokens."""
        for d in self.alg.inputs:
            if d.kind == "typed" and (d.type.kind != "vocab" or not d.type.star):
                self.error(InferenceError, f"the input {d.name} of an inference algorithm is a token sequence, "
                           f"{d.name} ∈ V*", d.pos)
        for d in self.alg.output_decls[:1]:
            if d.kind == "typed" and (d.type.kind != "vocab" or not d.type.star):
                self.error(InferenceError, f"an inference algorithm returns tokens: {d.name} ∈ V*", d.pos)

    def _before(self, s: Stmt) -> None:
        """ℓ ← length(x), x̂ ← [bos_token], y ← 0: what Algorithms 14 and 15 do before their loops."""
        v = s.value
        name = _target_name(s)
        if s.kind == "assign" and name is not None and v is not None:
            args = v.args[0] if v.op == "call" else ()
            if v.op == "call" and v.text == "length" and len(args) == 1 and args[0].op == "name":
                form = self.length_before(args[0])
                if form is not None:
                    self.lengths[key(name)] = (name, form)
                return
            if v.op == "column_list" and len(v.args) == 1 and v.args[0].op == "name":
                d = self.hyper_decl(v.args[0], "the start token", f"{v.args[0].text} ∈ V")
                # Started even when the token is wrong, so the loop is not told the sequence has no value.
                self.starts[key(name)] = parse_name(d.name).ascii() if d is not None else None
                self.texts[key(name)] = name
                return
            if v.op == "number":
                self.tokens.add(key(name))
                return
        self.error(InferenceError, "before its loop, an inference algorithm names the prompt's length "
                   "(ℓ ← length(x)), starts the sequence (x̂ ← [bos_token]) or sets the first token (y ← 0); "
                   "this line does none of these", s.pos)

    def length_before(self, e: Expr) -> Form | None:
        k = key(e.text)
        if k in self.inputs:
            return {("len", k): 1}
        if k in self.starts:
            return {(): 1}
        self.error(UnknownNameError, f"{e.text} is not a sequence here: length() takes an input or the sequence "
                   "started before the loop", e.pos)
        return None

    def seq_text(self, seq: str) -> str:
        return self.texts.get(seq, seq)

    # ------------------------------------------------------------------ the return
    def _return(self, ret: Stmt, step: Step) -> str | None:
        v = ret.value
        seq = step.seq
        if v.op == "name" and key(v.text) == seq:
            return "sequence"
        names = {k: form for k, (_, form) in self.lengths.items()}
        want_first = dict(step.start_length)
        want_first[()] = want_first.get((), 0) + 1
        if ("final", seq) in step.final_length and step.loop.kind == "for_range":
            return None  # the loop's bound is wrong, already reported: no end to compare with
        if v.op == "index" and v.args[0].op == "name" and key(v.args[0].text) == seq and len(v.args[1]) == 1 \
                and v.args[1][0].op == "range":
            first, last = v.args[1][0].args
            ok = True
            for bound, want, which in ((first, want_first, "first"), (last, step.final_length, "last")):
                got = step.form(bound, names, {seq: step.final_length})
                if got is not None and got != want:
                    ok = False
                    self.error(InferenceError, f"the {which} generated token is {step.text_of(seq)}"
                               f"[{step.spell(want)}], not {step.text_of(seq)}[{step.spell(got)}]: return "
                               f"{step.text_of(seq)}[{step.spell(want_first)} : {step.spell(step.final_length)}]",
                               bound.pos)
                ok = ok and got is not None
            return "generated" if ok else None
        seq_text = step.text_of(seq)
        self.error(InferenceError, f"{self.alg.name} returns the generated tokens, {seq_text}"
                   f"[{step.spell(want_first)} : {step.spell(step.final_length)}], or the whole sequence, "
                   f"{seq_text}", v.pos)
        return None


def key(text: str) -> str:
    """Names compare in their Unicode form, whatever the spelling (\\ell_gen, ℓ_gen)."""
    return parse_name(text).key()


def _target_name(s: Stmt) -> str | None:
    t = s.target
    if t is None or len(getattr(t, "children", ())) != 1:
        return None
    return str(t.children[0])


def hyper_shown(prog: Program, algorithm: str, hyper: dict[str, int | float] | None) -> Callable[[str], str]:
    """How a plan's one-line description shows the hyperparameter of a config key: `τ = tau`, with its
    value where the config gives one (`τ = tau = 1.0`)."""
    alg = next((a for a in prog.entries() if a.name == algorithm), None)
    # As the paper prints them, whichever spelling the file uses: \ell_{gen} shows as ℓ_gen.
    shown = {parse_name(d.name).ascii(): re.sub(r"_\{(\w+)\}", r"_\1", unicode_name(d.name))
             for d in (alg.hyper if alg else [])}
    values = hyper or {}

    def h(ascii_name: str) -> str:
        own = shown.get(ascii_name, ascii_name)
        text = own if own == ascii_name else f"{own} = {ascii_name}"
        return f"{text} = {values[ascii_name]}" if ascii_name in values else text

    return h


def describe_plan(prog: Program, plan: GenerationPlan, hyper: dict[str, int | float] | None = None) -> str:
    """One line: `DInference: samples from GPT2 (logits), τ = tau, ℓ_gen = ell_gen new tokens`."""
    h = hyper_shown(prog, plan.algorithm, hyper)
    out = f"{plan.algorithm}: samples from {plan.model} ({plan.model_output})"
    if plan.encoder_input:
        out += f" given {plan.encoder_input}"
    out += f", {h(plan.temperature)}"
    if plan.bos_token:
        out += f", from {h(plan.bos_token)}"
    if plan.eos_token:
        out += f" until {h(plan.eos_token)}"
    if plan.max_new_tokens:
        out += f", {'at most ' if plan.eos_token else ''}{h(plan.max_new_tokens)} new tokens"
    if plan.returns == "sequence":
        out += ", returns the whole sequence"
    return out


def check_plan_config(prog: Program, plan: GenerationPlan, hyper: dict[str, int | float]) -> list[AlgError]:
    """Values the config or -D gives the plan's hyperparameters must make sense: τ > 0, ℓ_gen ≥ 1, token ids."""
    alg = next((a for a in prog.entries() if a.name == plan.algorithm), None)
    if alg is None:
        return []
    decls = {parse_name(d.name).ascii(): d for d in alg.hyper}
    errors: list[AlgError] = []
    n_v = hyper.get("N_V")
    for role, name in (("temperature", plan.temperature), ("count", plan.max_new_tokens),
                       ("token", plan.bos_token), ("token", plan.eos_token)):
        if name is None or name not in hyper or name not in decls:
            continue
        v, d = hyper[name], decls[name]
        lo, hi = (d.type.interval if d.type is not None and d.type.interval else (0.0, float("inf")))
        if role == "temperature" and not lo < v < hi:
            why = f"the temperature {d.name} must lie in ({lo:g}, {'∞' if hi == float('inf') else f'{hi:g}'})"
        elif role == "count" and (not isinstance(v, int) or v < 1):
            why = f"{d.name}, the number of tokens to generate, must be a whole number ≥ 1"
        elif role == "token" and (not isinstance(v, int) or v < 0 or (isinstance(n_v, int) and v >= n_v)):
            why = f"{d.name} must be a token id, a whole number in 0 … N_V − 1" + (f" = {n_v - 1}" if isinstance(n_v, int)
                                                                                  else "")
        else:
            continue
        mod = alg.module
        errors.append(HyperparameterError(f"{name} = {v!r} in the config: {why}", d.pos,
                                          mod.line(d.pos.line) if mod is not None else None))
    return errors


__all__ = ["describe_plan", "check_plan_config", "find_inference", "inference_algorithms",
           "inference_hyperparameters", "is_inference", "plan_inference"]
