"""Lowering an IR graph to a Relax IRModule with relax.BlockBuilder, one Relax op (or a few) per IR node,
each by the lowering registered for its op (lowerings/).

Run-time sizes stay symbolic. Each named dim ("batch", "seq") is one int64 tirx.Var for the whole
function, as it is one size for the whole run in the interpreter, so one compiled module serves
every batch size and sequence length. Int64 scalars that are sizes (DIM, consts, arithmetic on
them) are followed as PrimExprs, so that slices, aranges and masks get symbolic shapes that TVM
can reason about; only a size computed from tensor data goes through tensor_to_shape, as does an int64
scalar input (a cache's length, passes/kv_buffers.py), once, at the start.

A named dim that is not an input's ("seq-1" after a slice) names the size Relax inferred where it
first appears. Where Relax infers a size that is not the IR's (a slice to `min(seq, 8)` where the
IR says "seq"), the value is checked at run time, as the interpreter checks it, and reshaped to the
IR's type, after which every later op sees the same symbolic dims the IR does.

`main` takes the graph's inputs, then one argument per distinct parameter (attribute num_input
marks the split, as relax.transform.LiftTransformParams and BindParams expect), and returns a
tuple of the outputs in signature order.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pseudoformer.backends.tvm.guard import require_tvm
from pseudoformer.backends.tvm.lowerings import LOWERINGS
from pseudoformer.backends.tvm.nbits import split_params
from pseudoformer.backends.tvm.nbits_int8 import int8_params
from pseudoformer.base.errors import BackendError
from pseudoformer.ir.graph import Graph
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op
from pseudoformer.ir.types import DType, TensorType

tvm = require_tvm()
from tvm import relax, tirx  # noqa: E402  (after the guard, which explains a missing TVM)
from tvm.relax import op as R  # noqa: E402

# Size arithmetic as PrimExprs; IR integer division truncates toward zero, like tirx.truncdiv.
_SIZE_ARITH: dict[Op, Callable[[Any, Any], Any]] = {
    Op.ADD: lambda a, b: a + b, Op.SUB: lambda a, b: a - b, Op.MUL: lambda a, b: a * b,
    Op.DIV: tirx.truncdiv, Op.MAX: tirx.max, Op.MIN: tirx.min,
}


@dataclass
class Lowered:
    """A Relax module and the names that its positional arguments and results stand for."""

    mod: Any  # tvm.IRModule
    inputs: list[tuple[str, TensorType]]
    outputs: list[tuple[str, TensorType]]
    params: list[tuple[str, TensorType]]  # the arguments after the inputs, in order


def to_relax(graph: Graph, *, func_name: str = "main", target_kind: str = "llvm", int8: bool = False) -> Lowered:
    """Lower `graph` to an IRModule whose `func_name` takes (*inputs, *params) and returns the outputs.

    `target_kind` ("llvm", "cuda") is for the lowerings whose computation depends on it (quantized.py)."""
    return RelaxLowering(graph, target_kind, int8=int8).lower(func_name)


def _var_name(name: str) -> str:
    # Relax prints and checks names as identifiers; the IR allows "ℓ_x" or "layers.0.W_q".
    clean = re.sub(r"\W", "_", name.encode("ascii", "backslashreplace").decode()).strip("_") or "v"
    return clean if not clean[0].isdigit() else f"v{clean}"


def _is_size(n: Node) -> bool:
    return isinstance(n.type, TensorType) and n.dtype is DType.int64 and n.shape == ()


class RelaxLowering:
    def __init__(self, graph: Graph, target_kind: str = "llvm", *, int8: bool = False) -> None:
        self.graph = graph
        self.target_kind = target_kind
        self.int8 = int8 and target_kind == "llvm"  # 4-bit products with int8 activations (nbits_int8.py)
        self.bb = relax.BlockBuilder()
        self.dims: dict[str, Any] = {}  # IR dim name -> its size: a tirx.Var or an expression of them
        self.vals: dict[int, Any] = {}  # IR node id -> Relax expression
        self.sizes: dict[int, Any] = {}  # IR node id -> PrimExpr, for int64 scalars that are sizes
        self.param_vars: dict[str, Any] = {}
        self.index = 0
        self.notes: dict[str, Any] = {}  # what a lowering works out once per graph (lowerings/quantized.py)
        self.analyzer = tvm.sym.Analyzer()

    # ---- types and dims

    def _dim(self, d: int | str) -> Any:
        if isinstance(d, int):
            return tirx.IntImm("int64", d)
        if d not in self.dims:
            self.dims[d] = tirx.Var(_var_name(d), "int64")
        return self.dims[d]

    def _rtype(self, t: TensorType) -> Any:
        return relax.TensorType([self._dim(d) for d in t.shape], t.dtype.value)

    @staticmethod
    def shape(expr: Any) -> list[Any]:
        return list(expr.ty.shape.values)

    # ---- the function

    def lower(self, func_name: str) -> Lowered:
        g = self.graph
        inputs = [relax.Var(_var_name(n.attrs["name"]), self._rtype(n.type)) for n in g.inputs]
        for n, v in zip(g.inputs, inputs, strict=True):
            self.vals[id(n)] = v
        params = g.params()
        for p in params:
            self.param_vars[p.attrs["name"]] = relax.Var(_var_name(p.attrs["name"]), self._rtype(p.type))
        # the int8 kernels' weights, laid out at compile time (build.py computes them): parameters of their own
        extra = int8_params(g, split_params(g)) if self.int8 else {}
        for name, t in extra.items():
            self.param_vars[name] = relax.Var(_var_name(name), self._rtype(t))
        args = inputs + [self.param_vars[p.attrs["name"]] for p in params] + [self.param_vars[k] for k in extra]
        with self.bb.function(func_name, args, attrs={"num_input": len(inputs)}):
            with self.bb.dataflow():
                for n in g.inputs:  # a size given as an input (a cache's length): a PrimExpr, as a dim's would be
                    if _is_size(n):
                        self.size(n)
                for i, n in enumerate(g.nodes()):
                    self.index = i
                    if id(n) not in self.vals:
                        self._node(n)
                results = [self.tensor(n) for _, n in g.outputs]
                out = self.bb.emit_output(relax.Tuple(results))
            self.bb.emit_func_output(out)
        return Lowered(
            self.bb.get(),
            [(n.attrs["name"], n.type) for n in g.inputs],
            [(name, n.type) for name, n in g.outputs],
            [(p.attrs["name"], p.type) for p in params] + list(extra.items()),
        )

    def emit(self, expr: Any, n: Node | None = None) -> Any:
        """Bind `expr`; with the node it computes, make its shape the node's type where Relax's differs."""
        v = self.bb.emit(expr, name_hint=f"v{self.index}")
        if n is None:
            return v
        have = self.shape(v)
        want = []
        for d, h in zip(n.shape, have, strict=True):
            if isinstance(d, str) and d not in self.dims:
                self.dims[d] = h  # a dim's first appearance names whatever size Relax found for it
            want.append(self._dim(d))
        differ = [i for i, (h, w) in enumerate(zip(have, want, strict=True))
                  if not self.analyzer.can_prove_equal(h, w)]
        if not differ:
            return v
        # match_cast would say this, but CanonicalizeBindings in TVM 0.27 crashes on a match_cast of
        # a tensor to a shape that is not its own; an assert and a reshape (a view) say it too.
        cond = tirx.all(*(tirx.EQ(have[i], want[i]) for i in differ))
        where = f"{n.op.value} at {n.span or n.scope or f'%{self.index}'}"
        message = f"{where}: sizes {{}} differ from the type {n.type}, whose dims are {{}}"
        self.bb.emit(R.assert_op(relax.prim_value(cond), [relax.ShapeExpr(have), relax.ShapeExpr(want)], message))
        return self.bb.emit(R.reshape(v, want), name_hint=f"v{self.index}")

    # ---- values

    def tensor(self, n: Node) -> Any:
        """The Relax value of node `n`, made from its size expression if it only had one so far."""
        if id(n) not in self.vals:
            if n.op is Op.CONST:
                return relax.const(n.attrs["value"], n.dtype.value)
            size = relax.ShapeExpr([self.sizes[id(n)]])
            self.vals[id(n)] = self.emit(R.reshape(R.shape_to_tensor(size), ()))
        return self.vals[id(n)]

    def size(self, n: Node) -> Any:
        """Node `n` (an int64 scalar) as a PrimExpr; a size read from tensor data gets a fresh var."""
        if id(n) not in self.sizes:
            shape = self.emit(R.tensor_to_shape(R.reshape(self.tensor(n), [1])))
            var = tirx.Var(f"size{self.index}", "int64")
            self.bb.match_cast(shape, relax.ShapeType([var]))  # on a shape, match_cast is fine
            self.sizes[id(n)] = var
        return self.sizes[id(n)]

    def _track_size(self, n: Node) -> bool:
        """Record an int64 scalar node's value as a PrimExpr if it is one; True if it was."""
        if not _is_size(n):
            return False
        op, a = n.op, n.attrs
        expr = None
        known = all(id(s) in self.sizes for s in n.src)
        if op is Op.CONST:
            expr = tirx.IntImm("int64", int(a["value"]))
        elif op is Op.DIM:
            src = self.vals.get(id(n.src[0]))
            if src is not None and src.ty.shape is not None:
                expr = self.shape(src)[a["axis"] % n.src[0].type.rank]
        elif op in _SIZE_ARITH and known:
            expr = _SIZE_ARITH[op](*(self.sizes[id(s)] for s in n.src))
        elif op is Op.NEG and known:
            expr = -self.sizes[id(n.src[0])]
        elif op is Op.CAST and known:
            expr = self.sizes[id(n.src[0])]
        if expr is None:
            return False
        self.sizes[id(n)] = self.analyzer.simplify(expr)
        return True

    # ---- one IR node

    def _node(self, n: Node) -> None:
        if n.op is Op.PARAM:
            self.vals[id(n)] = self.param_vars[n.attrs["name"]]
            return
        if self._track_size(n) or n.op is Op.CONST:
            return  # made into a tensor only where a tensor is needed
        lowering = LOWERINGS.get(n.op)
        if lowering is None or not lowering.accepts(n):
            raise BackendError(f"the TVM backend cannot lower {n.op.value} (at {n.span or n.scope or '?'})")
        # a tuple (buffered attention's results) has no shape to hold to the node's type; its elements do
        self.vals[id(n)] = self.emit(lowering.fn(self, n), n if isinstance(n.type, TensorType) else None)

