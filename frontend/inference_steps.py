"""One step of an inference algorithm's loop: call the model, take p, sample y, append y (Algorithms 14, 15).

frontend/inference.py checks the lines around the loop; this module checks the loop's own line and
the four lines of its body, each against what the generation runtime will do, and records what the
GenerationPlan needs (the model, its output, τ, ℓ_gen, the end token).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pseudoformer.frontend import positions
from pseudoformer.frontend.ast import Algorithm, Decl, Expr, Stmt, is_inference
from pseudoformer.frontend.errors import (
    ArityError,
    BadTypeError,
    HyperparameterError,
    InferenceError,
    UnknownNameError,
)
from pseudoformer.frontend.expressions.builtin_calls import BUILTINS
from pseudoformer.frontend.names import did_you_mean, parse_name
from pseudoformer.frontend.positions import Form

# The four lines of a step, in the order they must come.
_ROLES = ("model", "dist", "sample", "append")
_MISSING = {
    "model": "the loop never calls the model: P ← DTransformer(x | θ̂)",
    "dist": "the loop never takes the next token's distribution from the model's output: p ← P[:, …]",
    "sample": "the loop never samples: sample a token y from q ∝ p^{1/τ}",
    "append": "the sampled token is never appended to the model's input, so every step would see the same "
              "sequence: x ← [x, y]",
}
_SHAPE = ("a step of the generation loop calls the model (P ← DTransformer(x | θ̂)), takes the next token's "
          "distribution (p ← P[:, …]), samples (sample a token y from q ∝ p^{1/τ}) and appends the token "
          "(x ← [x, y])")


@dataclass
class Step:
    check: Any  # inference._Check: the algorithm, its declarations, and where errors go
    loop: Stmt
    counter: str | None = None  # `i` of `for i = 1, 2, …, ℓ_gen do`
    model: Algorithm | None = None
    model_output: str = "probabilities"
    encoder_input: str | None = None
    seq: str = ""  # the key of the sequence fed back to the model
    seq_text: str = ""
    start_length: Form = field(default_factory=dict)
    final_length: Form = field(default_factory=dict)
    temperature: str | None = None
    max_new_tokens: str | None = None
    eos_token: str | None = None

    def text_of(self, k: str) -> str:
        return self.seq_text if k == self.seq else self.check.seq_text(k)

    def _name(self, s: positions.Symbol) -> str:
        kind = s[0]
        if kind == "len":
            alias = next((text for text, form in self.check.lengths.values() if form == {s: 1}), None)
            return alias or f"length({self.text_of(s[1])})"
        if kind in ("cur", "final"):
            return f"length({self.text_of(s[1])})"
        if kind == "i":
            return self.counter or "i"
        return next((d.name for d in self.check.alg.hyper if parse_name(d.name).ascii() == s[1]), s[1])

    def spell(self, form: Form) -> str:
        return positions.spell(form, self._name)

    def form(self, e: Expr, names: dict[str, Form], lengths: dict[str, Form]) -> Form | None:
        """A position as a linear form, or None after reporting why `e` is not one."""
        op = e.op
        if op == "number" and isinstance(e.args[0], int):
            return positions.const(e.args[0])
        if op == "name":
            k = parse_name(e.text).key()
            if k in names:
                return names[k]
            d = self.check.hyper.get(parse_name(e.text).ascii())
            if d is not None and _is_size(d):
                return positions.sym("hp", parse_name(d.name).ascii())
        elif op == "call" and e.text == "length" and len(e.args[0]) == 1 and e.args[0][0].op == "name":
            k = parse_name(e.args[0][0].text).key()
            if k in lengths:
                return lengths[k]
            if k in self.check.inputs:
                return positions.sym("len", k)
        elif op in ("add", "sub"):
            a, b = (self.form(x, names, lengths) for x in e.args)
            return None if a is None or b is None else positions.add(a, b, 1 if op == "add" else -1)
        elif op == "neg":
            a = self.form(e.args[0], names, lengths)
            return None if a is None else positions.scale(a, -1)
        elif op in ("juxt", "matmul"):
            a, b = (self.form(x, names, lengths) for x in e.args)
            if a is None or b is None:
                return None
            ka, kb = positions.constant_of(a), positions.constant_of(b)
            if ka is not None or kb is not None:
                return positions.scale(b, ka) if ka is not None else positions.scale(a, kb)
        self.check.error(InferenceError, "a position here is a sum of lengths (ℓ, length(x)), the loop counter, "
                         "size hyperparameters and whole numbers", e.pos)
        return None


def _is_size(d: Decl) -> bool:
    return d.kind in ("bare", "derived") or (d.kind == "typed" and d.type is not None and d.type.kind == "nat")


def _role(s: Stmt) -> str | None:
    if s.kind == "sample":
        return "sample"
    if s.kind != "assign" or s.value is None or len(getattr(s.target, "children", ())) != 1:
        return None
    return {"call": "model", "index": "dist", "column_list": "append"}.get(s.value.op)


def check_loop(check: Any, loop: Stmt) -> Step | None:
    """Check the loop and its body; the Step says what the plan needs (None if the model is unusable)."""
    step = Step(check, loop)
    parts: dict[str, Stmt] = {}
    for s in loop.body:
        role = _role(s)
        if role is None:
            check.error(InferenceError, f"{_SHAPE}; this line is none of these", s.pos)
        elif role in parts:
            check.error(InferenceError, f"a second {'sample' if role == 'sample' else 'line like line'} "
                        f"{parts[role].number} in one step", s.pos)
        else:
            if later := [r for r in parts if _ROLES.index(r) > _ROLES.index(role)]:
                check.error(InferenceError, f"this line must come before line {parts[later[0]].number}: each step "
                            "calls the model, takes p, samples y and appends y, in that order", s.pos)
            parts[role] = s  # still checked, so the order is the one mistake reported
    for role in _ROLES:
        if role not in parts:
            check.error(InferenceError, _MISSING[role], loop.pos)
    if loop.kind == "for_range":
        _for_header(step, loop)
    if "model" in parts:
        _model(step, parts["model"])
    if step.model is None:
        return None
    k = step.seq
    start = step.start_length
    names = {a: form for a, (_, form) in check.lengths.items()}
    if loop.kind == "for_range":
        now = positions.add(start, {("i",): 1, (): -1})
        names[parse_name(step.counter or "i").key()] = positions.sym("i")
        step.final_length = positions.add(start, positions.sym("hp", step.max_new_tokens)) \
            if step.max_new_tokens else {("final", k): 1}
    else:
        now = {("cur", k): 1}
        step.final_length = {("final", k): 1}
    dist = _dist(step, parts.get("dist"), parts.get("model"), names, {k: now})
    token = _sample(step, parts.get("sample"), dist)
    _append(step, parts.get("append"), token)
    if loop.kind == "while":
        _while(step, loop, token, {a: form for a, (_, form) in check.lengths.items()}, {k: now})
    return step


def _for_header(step: Step, loop: Stmt) -> None:
    first, second, last = loop.bounds
    check = step.check
    step.counter = loop.name
    if not (first.op == "number" and first.args[0] == 1 and second.op == "number" and second.args[0] == 2):
        check.error(InferenceError, "write the generation loop as for i = 1, 2, …, ℓ_gen do", loop.pos)
    d = check.hyper_decl(last, "the loop's bound", "ℓ_gen ∈ ℕ, the number of tokens to generate")
    if d is not None and not _is_size(d):
        check.error(HyperparameterError, f"{d.name} counts the tokens to generate, so it is a whole number: "
                    f"{d.name} ∈ ℕ", last.pos)
    elif d is not None:
        step.max_new_tokens = parse_name(d.name).ascii()


def _model(step: Step, s: Stmt) -> None:
    """P ← Model(…, x | θ̂), or P ← softmax(Model(…, x | θ̂)) for a model that returns logits."""
    check = step.check
    v = s.value
    scope = check.prog.lookup(check.alg.module, v.text)
    wrapped = not scope and v.text == "softmax" and len(v.args[0]) == 1 and not v.args[1]
    call = v.args[0][0] if wrapped else v
    if call.op != "call" or (not check.prog.lookup(check.alg.module, call.text) and call.text in BUILTINS):
        check.error(InferenceError, "P is the model's output: P ← DTransformer(x | θ̂), or P ← softmax(GPT2(x | θ̂)) "
                    "for a model that returns logits", call.pos)
        return
    found = check.prog.lookup(check.alg.module, call.text)
    scope_names = sorted(n for n, algs in check.prog.scopes.get(check.alg.module.path, {}).items()
                         if not any(is_inference(a) for a in algs))
    if not found:
        check.error(UnknownNameError, f"unknown algorithm {call.text}: the loop must call a model in scope",
                    call.pos, did_you_mean(call.text, scope_names))
        return
    args, binds = call.args
    models = [a for a in found if not is_inference(a)]
    model = next((a for a in reversed(models) if len(a.data_args) == len(args)), None)
    if not models:
        check.error(InferenceError, f"{call.text} is an inference algorithm itself; the loop calls a model", call.pos)
        return
    if model is None or not 1 <= len(args) <= 2:
        sig = "; ".join(f"{a.name}({', '.join(a.data_args)} | …)" for a in models)
        check.error(ArityError, f"{call.text} takes {'/'.join(str(len(a.data_args)) for a in models)} token "
                    f"sequence(s) ({sig}); this call gives {len(args)}", call.pos)
        return
    for a, arg in zip(model.data_args, args, strict=True):
        d = next((d for d in model.inputs if d.name == a), None)
        if d is None or d.type is None or d.type.kind != "vocab" or not d.type.star:
            check.error(BadTypeError, f"{model.name}'s input {a} is not a token sequence ({a} ∈ V*), so it cannot "
                        "be sampled from token by token", arg.pos)
            return
        if arg.op != "name":
            check.error(InferenceError, f"give {model.name} its sequences by name, as {model.name}(x | θ̂)", arg.pos)
            return
    *encoder, seq = args
    _params(step, model, call, binds)
    if encoder:
        k = parse_name(encoder[0].text).key()
        if k not in check.inputs or k == parse_name(seq.text).key():
            check.error(InferenceError, f"{encoder[0].text}, the sequence {model.name} encodes once, is an input "
                        f"of {check.alg.name}", encoder[0].pos)
        step.encoder_input = parse_name(model.data_args[0]).ascii()
    k = parse_name(seq.text).key()
    if k in check.inputs:
        step.start_length = positions.sym("len", k)
    elif k in check.starts:
        step.start_length = positions.const(1)
    else:
        check.error(InferenceError, f"{seq.text}, the sequence fed back to {model.name}, has no value before the "
                    f"loop: take it as an input or start it as {seq.text} ← [bos_token]", seq.pos)
        return
    step.seq, step.seq_text, step.model = k, seq.text, model
    step.model_output = "logits" if wrapped else "probabilities"
    out = next(iter(model.output_decls), None)
    kind = out.type.kind if out is not None and out.type is not None else None
    if wrapped and kind in ("prob", "dist"):
        check.error(InferenceError, f"{model.name} returns probabilities already ({out.name} ∈ (0, 1)^{{…}}); "
                    f"take softmax only of a model that returns logits: P ← {model.name}(…)", v.pos)
    elif not wrapped and kind == "real":
        theta = binds[0].args[0].text if len(binds) == 1 and binds[0].args[0].op == "name" else "θ̂"
        check.error(InferenceError, f"{model.name} returns logits ({out.name} ∈ ℝ^{{…}}), not probabilities: "
                    f"P ← softmax({model.name}({', '.join(a.text for a in args)} | {theta}))", call.pos)


def _params(step: Step, model: Algorithm, call: Expr, binds: tuple) -> None:
    """The trained parameters after `|`: one name declared `θ̂ : Model`."""
    check = step.check
    if len(binds) != 1 or binds[0].args[1] is not None:
        check.error(ArityError, f"{model.name} takes its trained parameters after `|`, and nothing else: "
                    f"{model.name}(… | θ̂) with Parameters: θ̂ : {model.name}", call.pos)
        return
    b = binds[0].args[0]
    d = check.params.get(parse_name(b.text).key()) if b.op == "name" else None
    if b.op != "name" or d is None:
        check.error(UnknownNameError, f"{b.text or 'this'} is not a parameter of {check.alg.name}; declare the "
                    f"trained parameters: Parameters: θ̂ : {model.name}", b.pos)
    elif d.kind != "alg_group":
        check.error(BadTypeError, f"{d.name} must be declared as the parameters of {model.name}: "
                    f"Parameters: {d.name} : {model.name}", b.pos)
    elif parse_name(d.alg).key() != parse_name(model.name).key():
        check.error(BadTypeError, f"{d.name} holds the parameters of {d.alg} (line {d.pos.line}), not of "
                    f"{model.name}", b.pos)


def _dist(step: Step, s: Stmt | None, model_line: Stmt | None, names: dict, lengths: dict) -> str | None:
    """p ← P[:, <the length of the sequence fed back>]: the next token's distribution."""
    if s is None or model_line is None:
        return None
    check = step.check
    v = s.value
    big = str(model_line.target.children[0])
    base, idx = v.args
    if base.op != "name" or parse_name(base.text).key() != parse_name(big).key() or len(idx) != 2 \
            or idx[0].op != "all":
        check.error(InferenceError, f"p is a column of the model's output: p ← {big}[:, …]", v.pos)
        return None
    want = lengths[step.seq]
    got = step.form(idx[1], names, lengths)
    if got is not None and got != want:
        at = f" ({step.seq_text} has {step.spell(want)} tokens at step {step.counter})" \
            if step.loop.kind == "for_range" else ""
        off = positions.constant_of(positions.add(got, want, -1))
        how = f"; this is {positions.offset_words(off)}" if off is not None else ""
        check.error(InferenceError, f"p must be the distribution after the last token of {step.seq_text}: "
                    f"expected {big}[:, {step.spell(want)}]{at}{how}", idx[1].pos)
    return str(s.target.children[0])


def _sample(step: Step, s: Stmt | None, dist: str | None) -> str | None:
    """sample a token y from q ∝ p^{1/τ}, with τ a real hyperparameter: the temperature."""
    if s is None:
        return None
    check = step.check
    v = s.value
    if v.op != "real_power":
        check.error(InferenceError, "sample at a temperature: q ∝ p^{1/τ}, with τ a hyperparameter", v.pos)
        return str(s.target.text)
    base, exponent = v.args
    if dist is not None and (base.op != "name" or parse_name(base.text).key() != parse_name(dist).key()):
        check.error(InferenceError, f"sample from {dist}, the distribution taken on the line before: "
                    f"q ∝ {dist}^{{1/τ}}", base.pos)
    if exponent.op != "div" or exponent.args[0].op != "number" or exponent.args[0].args[0] != 1 \
            or exponent.args[1].op != "name":
        check.error(InferenceError, "the exponent is 1/τ, with τ the temperature, a hyperparameter", exponent.pos)
        return str(s.target.text)
    tau = exponent.args[1]
    d = check.hyper_decl(tau, "the temperature", f"{tau.text} ∈ (0, ∞)")
    if d is not None and (d.type is None or d.type.kind != "real" or d.type.dims):
        check.error(HyperparameterError, f"the temperature {d.name} is a positive real: {d.name} ∈ (0, ∞)", tau.pos)
    elif d is not None:
        step.temperature = parse_name(d.name).ascii()
    return str(s.target.text)


def _append(step: Step, s: Stmt | None, token: str | None) -> None:
    """x ← [x, y]: the sampled token goes at the end of what the model reads next."""
    if s is None or token is None or not step.seq:
        return
    target = str(s.target.children[0])
    items = s.value.args
    want = f"{step.seq_text} ← [{step.seq_text}, {token}]"
    if parse_name(target).key() != step.seq:
        step.check.error(InferenceError, f"the sampled token {token} must be appended to {step.seq_text}, the "
                         f"sequence the model reads, not to {target}: {want}", s.pos)
    elif len(items) != 2 or any(i.op != "name" for i in items) \
            or [parse_name(i.text).key() for i in items] != [step.seq, parse_name(token).key()]:
        step.check.error(InferenceError, f"append the sampled token {token} to the end of {step.seq_text}: {want}",
                         s.value.pos)


def _while(step: Step, loop: Stmt, token: str | None, names: dict, lengths: dict) -> None:
    """while y ≠ eos_token [∧ length(x̂) ≤ ℓ_gen] do: stop at the end token, or after ℓ_gen new tokens."""
    check = step.check
    conjuncts, stack = [], [loop.value]
    while stack:
        c = stack.pop()
        if c.op == "and":
            stack.extend(reversed(c.args))
        else:
            conjuncts.append(c)
    y = parse_name(token).key() if token else None
    before = len(check.errors)
    for c in conjuncts:
        (operands, rels) = c.args if c.op == "compare" else ((), ())
        if len(rels) != 1:
            check.error(InferenceError, "a while loop runs until the sampled token is the end token, with a "
                        "length cap if wanted: while y ≠ eos_token ∧ length(x̂) ≤ ℓ_gen do", c.pos)
            continue
        a, b = operands
        rel = rels[0]
        if rel == "!=":
            if b.op == "name" and parse_name(b.text).key() == y:
                a, b = b, a
            if a.op != "name" or parse_name(a.text).key() != y or b.op != "name":
                check.error(InferenceError, f"the loop stops when the sampled token {token} is the end token: "
                            f"while {token} ≠ eos_token do", c.pos)
                continue
            if y not in check.tokens:
                check.error(InferenceError, f"{token} has no value when the loop first tests it: set {token} ← 0 "
                            "before the loop, as Algorithm 15 does", a.pos)
            d = check.hyper_decl(b, "the end token", f"{b.text} ∈ V")
            if d is not None and step.eos_token is None:
                step.eos_token = parse_name(d.name).ascii()
            continue
        if rel in (">=", ">"):
            a, b, rel = b, a, "<=" if rel == ">=" else "<"
        left, right = step.form(a, names, lengths), step.form(b, names, lengths)
        if rel not in ("<=", "<") or left is None or right is None:
            if left is not None and right is not None:
                check.error(InferenceError, "cap the length with ≤: length(x̂) ≤ ℓ_gen", c.pos)
            continue
        new = positions.add(right, step.start_length, -1)  # tokens generated when the test first fails
        new = positions.add(new, positions.const(1 if rel == "<=" else 0))
        hp = [s[1] for s in new if s and s[0] == "hp"]
        if left != lengths[step.seq]:
            check.error(InferenceError, f"the cap is on the length of {step.seq_text}, the sequence being "
                        f"generated: length({step.seq_text}) ≤ ℓ_gen", a.pos)
        elif len(new) != 1 or len(hp) != 1 or new[("hp", hp[0])] != 1:
            check.error(InferenceError, f"the length cap allows a hyperparameter's number of new tokens, as "
                        f"length({step.seq_text}) ≤ ℓ_gen allows ℓ_gen; this one allows {step.spell(new)}", c.pos)
        else:
            step.max_new_tokens = hp[0]
    if step.eos_token is None and y is not None and len(check.errors) == before:
        check.error(InferenceError, f"the loop stops when the sampled token is the end token: while {token} ≠ "
                    "eos_token do", loop.value.pos)
