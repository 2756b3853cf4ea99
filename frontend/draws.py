"""A random draw in a model, `Y ← a or b randomly with probability p or 1 − p` (Algorithm 12's random choice):
each entry of the value is a with probability p, else b, drawn alone. Dropout is the draw

    X̃ ← 0 or X / (1 − p) randomly with probability p or 1 − p

(torch's inverted dropout: dropped with probability p, the kept entries scaled by 1/(1 − p)).

A model is one deterministic graph, so the draw is made where the graph is used:
- compiled for inference (check, inspect, compile, run, generate), the draw is its expectation p·a + (1 − p)·b,
  and a draw of 0 or X / (1 − p) is X itself (torch's eval mode): nothing of it is left in the graph;
- trained (`pseudoformer train`, elaborated with `draws`), it is an input of the loss graph, `draw_<k>` (k counting
  the draws made from 0, each unrolled layer's its own), float32 [batch, …the value's dims], 1 where a is chosen:
  the value is M·a + (1 − M)·b, and the host fills M each step from a documented generator
  (pseudoformer/training/draws.py), so that another framework can replay the masks.

The probability is a number known when the model is compiled (a literal or a hyperparameter), in (0, 1), and
the second one is 1 − p. The draw is over a whole value of the example (the target a name, outside any map).
"""

from __future__ import annotations

import math

from pseudoformer.frontend.ast import Expr, Stmt
from pseudoformer.frontend.errors import BadTypeError
from pseudoformer.frontend.expressions.core import const
from pseudoformer.frontend.expressions.forms import ev_val
from pseudoformer.frontend.frame import Frame
from pseudoformer.frontend.tensor_ops import ShapeMismatch, broadcast_dims, cast_real, elementwise, show
from pseudoformer.frontend.values import Val
from pseudoformer.ir import DType, Op, TensorType

DRAW = "draw_"  # the prefix of a draw's input in a trained loss graph (an identifier: the torch module's keyword)
HOW = "Y ← 0 or X / (1 − p) randomly with probability p or 1 − p"


def draw_value(f: Frame, s: Stmt) -> Val:
    """The value a random choice in a model assigns (see the module's docstring)."""
    a_e, b_e, p_e, q_e = s.value.args
    if len(s.target.children) > 1 or f.maps:
        raise f.error(BadTypeError, "`… randomly with probability …` in a model draws each entry of a whole value "
                      f"alone: assign the value by its name, outside a map ({HOW})", s.pos)
    p, q = ev_val(f, p_e), ev_val(f, q_e)
    known = [v.const for v in (p, q) if isinstance(v.const, (int, float)) and not isinstance(v.const, bool)]
    if len(known) < 2:
        if f.root().symbolic:  # checked without values: the expectation stands for every value
            return _mix(f, p, ev_val(f, a_e), q, ev_val(f, b_e))
        raise f.error(BadTypeError, "a draw's probability is a number known when the model is compiled (a literal "
                      f"or a hyperparameter): {HOW}", p_e.pos)
    pv, qv = (float(k) for k in known)
    if not 0 < pv < 1:
        raise f.error(BadTypeError, f"`… randomly with probability p or 1 − p` draws with p in (0, 1), got {pv:g}",
                      p_e.pos)
    if not math.isclose(pv + qv, 1.0, rel_tol=0, abs_tol=1e-12):
        raise f.error(BadTypeError, "the second choice's probability is 1 − p: the probabilities of the two "
                      "choices add up to one", q_e.pos)
    if f.b.draws is None:
        return _expectation(f, a_e, b_e, p, q)
    a, b = cast_real(f.b, ev_val(f, a_e)), cast_real(f.b, ev_val(f, b_e))
    try:
        dims = tuple(f.b.resolve(d) for d in broadcast_dims(f.b, [a, b], "draw"))
    except ShapeMismatch:
        raise f.error(BadTypeError, f"a draw's two choices have different shapes: {show(a)} and {show(b)}",
                      s.pos) from None
    if not (a.batched or b.batched) or a.free or b.free:
        raise f.error(BadTypeError, "a draw is over a value of each example (one computed from the model's "
                      f"input), each entry drawn alone: {HOW}", s.pos)
    shape = ("batch", *(d.dim() for d in dims))
    if any(isinstance(d, str) and "?" in d for d in shape):
        raise f.error(BadTypeError, f"the shape of the value drawn over is not known here ({show(b)}): draw "
                      "over a value whose sizes are", s.pos)
    node = f.b.node(Op.INPUT, name=f"{DRAW}{len(f.b.draws)}", type=TensorType(DType.float32, shape))
    f.b.draws.append((node, pv))
    return _mix(f, Val(node, "real", dims, (), True), a, None, b)


def _expectation(f: Frame, a_e: Expr, b_e: Expr, p: Val, q: Val) -> Val:
    """p·a + (1 − p)·b; 0 or X / (1 − p) is X."""
    a = ev_val(f, a_e)
    if a.const == 0 and b_e.op == "div":
        divisor = ev_val(f, b_e.args[1])
        if isinstance(divisor.const, (int, float)) and math.isclose(float(divisor.const), float(q.const),
                                                                     rel_tol=1e-12):
            return ev_val(f, b_e.args[0])
    return _mix(f, p, a, q, ev_val(f, b_e))


def _mix(f: Frame, m: Val, a: Val, q: Val | None, b: Val) -> Val:
    """m·a + q·b (q None: 1 − m), the terms of a zero a left out."""
    if q is None:
        q = elementwise(f.b, Op.SUB, [const(f, 1.0), m], "subtract")
    b_part = elementwise(f.b, Op.MUL, [cast_real(f.b, q), cast_real(f.b, b)], "multiply element-wise")
    if a.const == 0:
        return b_part
    a_part = elementwise(f.b, Op.MUL, [cast_real(f.b, m), cast_real(f.b, a)], "multiply element-wise")
    return elementwise(f.b, Op.ADD, [a_part, b_part], "add")
