"""ETraining's masking lines (Algorithm 12, lines 4–7), checked for frontend/training.py:

    for t = 1, …, ℓ do
      x̃_n[t] ← mask_token or x_n[t] randomly with probability p_mask or 1 − p_mask
    end
    T̃ ← {t ∈ [ℓ] : x̃_n[t] = mask_token}

The host draws the mask; what these lines name (the copy x̃_n, the token, p_mask, the set T̃) becomes the
TrainingPlan's MaskingPlan and the loss graph's inputs.
"""

from __future__ import annotations

from typing import Any

from pseudoformer.frontend.ast import Expr, Stmt
from pseudoformer.frontend.inference import key
from pseudoformer.frontend.names import parse_name


def check_mask_loop(check: Any, s: Stmt) -> None:
    """for t = 1, …, ℓ do  x̃_n[t] ← mask_token or x_n[t] randomly with probability p_mask or 1 − p_mask  end"""
    inner = [b for b in s.body if b.kind == "random"]
    for b in s.body:
        if b is not (inner[0] if inner else None):
            check.error("the masking loop has one line: x̃_n[t] ← mask_token or x_n[t] randomly with "
                        "probability p_mask or 1 − p_mask", b.pos)
    if not inner:
        check.error("a loop inside the step masks the example: for t = 1, …, ℓ do x̃_n[t] ← mask_token or "
                    "x_n[t] randomly with probability p_mask or 1 − p_mask end", s.pos)
        return
    r = inner[0]
    t = s.name or "t"
    tgt = r.target
    items = tgt.children[1] if len(tgt.children) > 1 else None
    if tgt.data != "target" or items is None or len(items) != 1 or items[0].op != "name" or \
            key(items[0].text) != key(t):
        check.error(f"the masking line sets one position of the masked copy: x̃_n[{t}] ← …", r.pos)
    else:
        check.masked = str(tgt.children[0])
        if key(check.masked) in check.members:
            check.error(f"the masked copy needs a name of its own (x̃_n), not {check.masked}, which is the "
                        "example the loss scores", r.pos)
    token, keep, p, q = r.value.args
    check.mask_token = _token(check, token)
    if keep.op != "index" or keep.args[0].op != "name" or key(keep.args[0].text) not in check.members or \
            len(keep.args[1]) != 1 or keep.args[1][0].op != "name" or key(keep.args[1][0].text) != key(t):
        check.error(f"the other choice keeps the example's token: {check.member_text()}[{t}]", keep.pos)
    d = check.hyper_decl(p, "the masking probability", "p_mask ∈ (0, 1)")
    check.p_mask = parse_name(d.name).ascii() if d is not None else None
    ok_q = q.op == "sub" and q.args[0].op == "number" and q.args[0].args[0] == 1 and \
        q.args[1].op == "name" and p.op == "name" and key(q.args[1].text) == key(p.text)
    if not ok_q:
        check.error(f"the second choice's probability is 1 − {p.text or 'p_mask'}: the probabilities of the two "
                    "choices add up to one", q.pos)


def _token(check: Any, e: Expr) -> str | int | None:
    if e.op == "number" and isinstance(e.args[0], int):
        return e.args[0]
    if e.op == "name":
        return parse_name(e.text).ascii()
    check.error("the mask token is a token id: a name the config sets (mask_token) or a number", e.pos)
    return None


def check_set(check: Any, s: Stmt) -> None:
    """T̃ ← {t ∈ [ℓ] : x̃_n[t] = mask_token}: the masked positions."""
    var, _bound, cond = s.value.args
    tgt = s.target
    if tgt.data != "target" or len(tgt.children) != 1:
        check.error("the set of masked positions is named: T̃ ← {t ∈ [ℓ] : x̃_n[t] = mask_token}", s.pos)
        return
    check.set_name = str(tgt.children[0])
    ok = cond.op == "compare" and cond.args[1] == ("==",) and len(cond.args[0]) == 2
    if ok:
        lhs, rhs = cond.args[0]
        ok = lhs.op == "index" and lhs.args[0].op == "name" and check.masked is not None and \
            key(lhs.args[0].text) == key(check.masked) and len(lhs.args[1]) == 1 and \
            lhs.args[1][0].op == "name" and key(lhs.args[1][0].text) == key(var) and \
            rhs.op in ("name", "number") and _same_token(check, rhs)
    if not ok:
        masked = check.masked or "x̃_n"
        check.error(f"T̃ is the set of masked positions: {{{var} ∈ [ℓ] : {masked}[{var}] = mask_token}}, with "
                    "the token and the copy of the masking line", cond.pos)


def _same_token(check: Any, e: Expr) -> bool:
    want = check.mask_token
    got = e.args[0] if e.op == "number" else parse_name(e.text).ascii()
    return want is not None and got == want
