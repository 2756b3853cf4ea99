"""Lowering an IR graph to a Relax IRModule with relax.BlockBuilder, one Relax op (or a few) per IR node.

Run-time sizes stay symbolic. Each named dim ("batch", "seq") is one int64 tirx.Var for the whole
function, as it is one size for the whole run in the interpreter, so one compiled module serves
every batch size and sequence length. Int64 scalars that are sizes (DIM, consts, arithmetic on
them) are followed as PrimExprs, so that slices, aranges and masks get symbolic shapes that TVM
can reason about; only a size computed from tensor data goes through tensor_to_shape.

A named dim that is not an input's ("seq-1" after a slice) names the size Relax inferred where it
first appears. Where Relax infers a size that is not the IR's (a slice to `min(seq, 8)` where the
IR says "seq"), the value is checked at run time, as the interpreter checks it, and reshaped to the
IR's type, after which every later op sees the same symbolic dims the IR does.

`main` takes the graph's inputs, then one argument per distinct parameter (attribute num_input
marks the split, as relax.transform.LiftTransformParams and BindParams expect), and returns a
tuple of the outputs in signature order.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pseudoformer.backends.tvm.guard import require_tvm
from pseudoformer.errors import BackendError
from pseudoformer.ir.graph import Graph
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op
from pseudoformer.ir.types import DType, TensorType

tvm = require_tvm()
from tvm import relax, tirx  # noqa: E402  (after the guard, which explains a missing TVM)
from tvm.relax import op as R  # noqa: E402

_UNARY: dict[Op, Callable[[Any], Any]] = {
    Op.NEG: R.negative, Op.EXP: R.exp, Op.LOG: R.log, Op.SQRT: R.sqrt, Op.TANH: R.tanh, Op.ERF: R.erf,
    Op.SIN: R.sin, Op.COS: R.cos, Op.ABS: R.abs, Op.RELU: R.nn.relu, Op.NOT: R.logical_not,
}
_BINARY: dict[Op, Callable[[Any, Any], Any]] = {
    Op.ADD: R.add, Op.SUB: R.subtract, Op.MUL: R.multiply, Op.DIV: R.divide, Op.POW: R.power,
    Op.MAX: R.maximum, Op.MIN: R.minimum, Op.LT: R.less, Op.LE: R.less_equal, Op.GT: R.greater,
    Op.GE: R.greater_equal, Op.EQ: R.equal, Op.NE: R.not_equal, Op.AND: R.logical_and,
    Op.OR: R.logical_or, Op.MATMUL: R.matmul,
}
_RELATION = {"<": R.less, "<=": R.less_equal, ">": R.greater, ">=": R.greater_equal, "==": R.equal,
             "!=": R.not_equal}
_REDUCE = {Op.REDUCE_SUM: R.sum, Op.REDUCE_MAX: R.max, Op.REDUCE_MEAN: R.mean}
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


def to_relax(graph: Graph, *, func_name: str = "main") -> Lowered:
    """Lower `graph` to an IRModule whose `func_name` takes (*inputs, *params) and returns the outputs."""
    return _Lowering(graph).lower(func_name)


def _var_name(name: str) -> str:
    # Relax prints and checks names as identifiers; the IR allows "ℓ_x" or "layers.0.W_q".
    clean = re.sub(r"\W", "_", name.encode("ascii", "backslashreplace").decode()).strip("_") or "v"
    return clean if not clean[0].isdigit() else f"v{clean}"


def _is_size(n: Node) -> bool:
    return n.dtype is DType.int64 and n.shape == ()


class _Lowering:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.bb = relax.BlockBuilder()
        self.dims: dict[str, Any] = {}  # IR dim name -> its size: a tirx.Var or an expression of them
        self.vals: dict[int, Any] = {}  # IR node id -> Relax expression
        self.sizes: dict[int, Any] = {}  # IR node id -> PrimExpr, for int64 scalars that are sizes
        self.param_vars: dict[str, Any] = {}
        self.index = 0
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
    def _shape(expr: Any) -> list[Any]:
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
        args = inputs + [self.param_vars[p.attrs["name"]] for p in params]
        with self.bb.function(func_name, args, attrs={"num_input": len(inputs)}):
            with self.bb.dataflow():
                for i, n in enumerate(g.nodes()):
                    self.index = i
                    if id(n) not in self.vals:
                        self._node(n)
                results = [self._tensor(n) for _, n in g.outputs]
                out = self.bb.emit_output(relax.Tuple(results))
            self.bb.emit_func_output(out)
        return Lowered(
            self.bb.get(),
            [(n.attrs["name"], n.type) for n in g.inputs],
            [(name, n.type) for name, n in g.outputs],
            [(p.attrs["name"], p.type) for p in params],
        )

    def _emit(self, expr: Any, n: Node | None = None) -> Any:
        """Bind `expr`; with the node it computes, make its shape the node's type where Relax's differs."""
        v = self.bb.emit(expr, name_hint=f"v{self.index}")
        if n is None:
            return v
        have = self._shape(v)
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

    def _tensor(self, n: Node) -> Any:
        """The Relax value of node `n`, made from its size expression if it only had one so far."""
        if id(n) not in self.vals:
            if n.op is Op.CONST:
                return relax.const(n.attrs["value"], n.dtype.value)
            size = relax.ShapeExpr([self.sizes[id(n)]])
            self.vals[id(n)] = self._emit(R.reshape(R.shape_to_tensor(size), ()))
        return self.vals[id(n)]

    def _size(self, n: Node) -> Any:
        """Node `n` (an int64 scalar) as a PrimExpr; a size read from tensor data gets a fresh var."""
        if id(n) not in self.sizes:
            shape = self._emit(R.tensor_to_shape(R.reshape(self._tensor(n), [1])))
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
                expr = self._shape(src)[a["axis"] % n.src[0].type.rank]
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
        self.vals[id(n)] = self._emit(self._expr(n), n)

    def _expr(self, n: Node) -> Any:
        op, a = n.op, n.attrs
        t = self._tensor
        if op in _UNARY:
            return _UNARY[op](t(n.src[0]))
        if op in _BINARY:
            return _BINARY[op](t(n.src[0]), t(n.src[1]))
        if op is Op.GELU:
            approximate = a.get("approximate", "none")
            if approximate not in ("none", "tanh"):
                raise BackendError(f"gelu approximate={approximate!r}: the backend knows 'none' and 'tanh'")
            return R.nn.gelu(t(n.src[0])) if approximate == "none" else R.nn.gelu_tanh(t(n.src[0]))
        if op is Op.CAST:
            return R.astype(t(n.src[0]), n.dtype.value)
        if op is Op.WHERE:
            return R.where(*(t(s) for s in n.src))
        if op is Op.TRANSPOSE:
            return R.permute_dims(t(n.src[0]), list(a["perm"]))
        if op is Op.UNSQUEEZE:
            return R.expand_dims(t(n.src[0]), sorted(a["axes"]))
        if op is Op.SQUEEZE:
            return R.squeeze(t(n.src[0]), sorted(a["axes"]))
        if op is Op.RESHAPE:
            return self._reshape(n)
        if op is Op.CONCAT:
            return R.concat([t(s) for s in n.src], axis=a["axis"])
        if op in _REDUCE:
            axes = sorted(ax % n.src[0].type.rank for ax in a["axes"])
            if not axes:  # "reduce nothing" to the IR; Relax would reduce everything
                return R.astype(t(n.src[0]), n.dtype.value)
            return _REDUCE[op](t(n.src[0]), axes, keepdims=bool(a.get("keepdims", False)))
        if op is Op.SOFTMAX:
            return R.nn.softmax(t(n.src[0]), axis=a["axis"])
        if op is Op.GATHER:
            axis = a["axis"] % n.src[0].type.rank
            if n.src[1].op is not Op.INPUT:  # an input's indices are checked before the run (build.py)
                self._check_indices(n, axis)
            # "wrap" is numpy.take for every valid index, negative ones included, and never reads
            # outside the table even if an invalid one got past the checks ("fast" would crash).
            return R.take(t(n.src[0]), t(n.src[1]), axis=axis, mode="wrap")
        if op is Op.DIM:  # a size Relax cannot see: the operand's shape is not known
            shape = R.shape_to_tensor(R.shape_of(t(n.src[0])))
            return R.take(shape, relax.const(a["axis"] % n.src[0].type.rank, "int64"), axis=0)
        if op is Op.ARANGE:
            return R.arange(0, self._size(n.src[0]), 1, "int64")
        if op is Op.SLICE:
            axis = a["axis"] % n.src[0].type.rank
            return R.strided_slice(t(n.src[0]), [axis], [self._size(n.src[1])], [self._size(n.src[2])])
        if op is Op.INDEX_MASK:
            return self._mask(self._size(n.src[0]), self._size(n.src[1]), a["rel"])
        if op is Op.LAYER_NORM:
            x, g, b = (t(s) for s in n.src)
            return R.nn.layer_norm(x, g, b, axes=[a["axis"] % n.src[0].type.rank], epsilon=float(a["eps"]))
        if op is Op.RMS_NORM:
            return self._rms_norm(n)
        if op is Op.ATTENTION:
            return self._attention(n)
        raise BackendError(f"the TVM backend cannot lower {op.value} (at {n.span or n.scope or '?'})")

    def _check_indices(self, n: Node, axis: int) -> None:
        """Gather indices computed in the graph: an error at run time unless all are in [-size, size).

        The interpreter raises numpy's IndexError there and ONNX Runtime its Gather error; the
        message names the op, its source line and the indices' range. Two int64 reductions over the
        indices (token ids, positions: a few thousand at most) and an assert the VM runs on the host.
        """
        idx = self._tensor(n.src[1])
        size = self._shape(self._tensor(n.src[0]))[axis]
        bound = (relax.const(int(size), "int64") if isinstance(size, tirx.IntImm)
                 else self._emit(R.reshape(R.shape_to_tensor(relax.ShapeExpr([size])), ())))
        axes = list(range(n.src[1].type.rank))
        lo = self._emit(R.min(idx, axes) if axes else idx)
        hi = self._emit(R.max(idx, axes) if axes else idx)
        inside = R.logical_and(R.greater_equal(lo, R.negative(bound)), R.less(hi, bound))
        ok = self._emit(R.logical_or(inside, R.greater(lo, hi)))  # min > max: no indices at all
        where = f"gather at {n.span or n.scope or f'%{self.index}'}"
        self.bb.emit(R.assert_op(ok, [lo, hi, bound],
                                 f"{where}: indices from {{}} to {{}}, out of range for an axis of size {{}}"))

    def _rms_norm(self, n: Node) -> Any:
        """x / √(mean(x²) + ε) ⊙ γ: Relax's rms_norm over the last axis (one kernel), spelled out over
        another (its legalization indexes γ wrongly there: TVM 0.27's topi fails to build it)."""
        x, g = (self._tensor(s) for s in n.src)
        rank = n.src[0].type.rank
        axis, eps = n.attrs["axis"] % rank, float(n.attrs["eps"])
        if axis == rank - 1:
            return R.nn.rms_norm(x, g, axes=[axis], epsilon=eps)
        dtype = n.dtype.value
        mean = self._emit(R.mean(R.multiply(x, x), [axis], keepdims=True))
        root = self._emit(R.sqrt(R.add(mean, relax.const(eps, dtype))))
        shape = [-1 if i == axis else 1 for i in range(rank)]
        return R.multiply(self._emit(R.divide(x, root)), R.reshape(g, shape))

    def _reshape(self, n: Node) -> Any:
        src_dims = n.src[0].shape
        x = self._tensor(n.src[0])
        have = self._shape(x)
        target = []
        for d in n.attrs["shape"]:
            if isinstance(d, str):
                if d not in src_dims:  # the verifier rejects such graphs; say so rather than guess
                    raise BackendError(f"reshape to {n.type} at {n.span or n.scope or '?'}: "
                                       f"dim {d!r} is not a dim of the operand {n.src[0].type}")
                target.append(have[src_dims.index(d)])
            else:
                target.append(tirx.IntImm("int64", d))
        return R.reshape(x, target)

    def _mask(self, rows: Any, cols: Any, rel: str, first_row: Any = 0) -> Any:
        i = self._emit(R.expand_dims(R.arange(first_row, first_row + rows, 1, "int64"), [1]))
        j = self._emit(R.expand_dims(R.arange(0, cols, 1, "int64"), [0]))
        return _RELATION[rel](i, j)

    def _attention(self, n: Node) -> Any:
        """softmax(q kᵀ·scale, masked) v with plain ops, which the matmul and softmax schedules cover."""
        q, k, v = (self._tensor(s) for s in n.src[:3])
        rank = n.src[1].type.rank
        perm = list(range(rank - 2)) + [rank - 1, rank - 2]
        scores = self._emit(R.multiply(R.matmul(q, R.permute_dims(k, perm)),
                                       relax.const(n.attrs["scale"], n.dtype.value)))
        keep = self._tensor(n.src[3]) if len(n.src) > 3 else None
        if n.attrs["causal"]:
            # Bottom-right aligned (ir/ops.py): query i is position i + s_k − s_q of the keys.
            sq, sk = self._shape(q)[-2], self._shape(k)[-2]
            causal = self._emit(self._mask(sq, sk, ">=", first_row=sk - sq))
            keep = causal if keep is None else self._emit(R.logical_and(keep, causal))
        if keep is not None:
            scores = self._emit(R.where(keep, scores, relax.const(-math.inf, n.dtype.value)))
        return R.matmul(self._emit(R.nn.softmax(scores, axis=-1)), v)
