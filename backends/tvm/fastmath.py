"""Vectorisable exp, tanh and erf: TVM's polynomial approximations in place of libm calls.

LLVM has no vector libm here, so exp and tanh inside a vectorised loop become one scalar expf
call per lane: the GELU epilogue of an MLP matmul took longer than the matmul. TVM's fast_exp,
fast_tanh and fast_erf are float32 polynomials within a few ulps, far inside the backend's 1e-4.
relax.transform.FastMathTransform covers exp, tanh, erf and softmax; GELU, which legalizes to
tanh or erf inside one op, is spelled out here so that it gets the fast versions too.

One difference from the interpreter: fast_exp clamps its argument, so a softmax row that is all
-inf (a query that may attend to nothing) comes out uniform instead of NaN.
"""

from __future__ import annotations

import math
from typing import Any

from pseudoformer.backends.tvm.errors import require_tvm

tvm = require_tvm()
from tvm import relax, te, topi  # noqa: E402

_SQRT_2_PI = math.sqrt(2.0 / math.pi)


def _gelu_tanh(x: te.Tensor) -> te.Tensor:
    inner = te.compute(x.shape, lambda *i: _SQRT_2_PI * (x(*i) + 0.044715 * x(*i) * x(*i) * x(*i)), "gelu_inner")
    t = topi.fast_tanh(inner)
    return te.compute(x.shape, lambda *i: 0.5 * x(*i) * (1.0 + t(*i)), "gelu_tanh")


def _gelu(x: te.Tensor) -> te.Tensor:
    scaled = te.compute(x.shape, lambda *i: x(*i) * (1.0 / math.sqrt(2.0)), "gelu_inner")
    e = topi.fast_erf(scaled)
    return te.compute(x.shape, lambda *i: 0.5 * x(*i) * (1.0 + e(*i)), "gelu")


_REWRITES = {
    "relax.nn.softmax": lambda bb, call: bb.call_te(topi.nn.fast_softmax, call.args[0], call.attrs.axis),
    "relax.exp": lambda bb, call: bb.call_te(topi.fast_exp, call.args[0]),
    "relax.tanh": lambda bb, call: bb.call_te(topi.fast_tanh, call.args[0]),
    "relax.erf": lambda bb, call: bb.call_te(topi.fast_erf, call.args[0]),
    "relax.nn.gelu": lambda bb, call: bb.call_te(_gelu, call.args[0]),
    "relax.nn.gelu_tanh": lambda bb, call: bb.call_te(_gelu_tanh, call.args[0]),
}


@relax.expr_functor.mutator
class _FastMath(relax.PyExprMutator):
    def visit_call_(self, call: Any) -> Any:  # noqa: N802 (TVM's visitor naming)
        call = super().visit_call_(call)
        name = getattr(call.op, "name", "")
        if name in _REWRITES and call.args[0].ty.dtype == "float32":
            return _REWRITES[name](self.builder_, call)
        return call


@tvm.transform.module_pass(opt_level=0, name="PseudoformerFastMath")
def fast_math(mod: Any, _ctx: Any) -> Any:
    mutator = _FastMath(mod)
    for gv, func in list(mod.functions_items()):
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()
