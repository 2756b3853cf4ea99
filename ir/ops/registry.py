"""The op registry: each op defined once, with everything the interpreter, verifier, printer, parser,
passes and backends ask of it.

As jax defines a primitive with its impl, abstract eval and differentiation rules in one place, an
OpDef holds, for one op:

  attrs       its attributes: name, kind (for the verifier and the IR text parser), default, choices
  infer       its typing rule: operand types and attributes → result type, or IRTypeError
  impl        its numpy reference semantics, which the interpreter runs
  traits      what passes ask instead of listing ops: elementwise, the axes it reduces, how the op maps positions
              (kv_cache, last_position), which layout rule applies (layout), how it fares in
              float16 (precision)
  decompose   optionally, the op as a formula of other ops, which a backend without a kernel for
              it lowers instead (passes/decompose.py)
  vjp         the vector-Jacobian product: the cotangents of the operands from the result's, which the
              reverse-mode autodiff (passes/autodiff.py) of a training step composes; None where the op has no
              derivative (a comparison, an index) or is never trained through, and the autodiff says so
  example     a small graph that uses the op (in each of its forms worth testing): the registry's
              tests check the typing rule, the impl and the decomposition on it, and each backend's
              tests compare their lowering of it with the interpreter, so a new op is tested everywhere
              without a test edit (ir/examples.py builds and feeds it)
  overwrites  the operands the op may write over: a cache buffer the attention appends to in place
              (buffered_attention); the verifier holds each to be a graph input that nothing else reads

Adding an op is its name in op.py and one module (or a few lines in its family's module) here, plus a
lowering per backend that has a kernel for it; a backend without one lowers the decomposition.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.types import Dim, DType, TensorType, TupleType, broadcast_shapes

if TYPE_CHECKING:
    from pseudoformer.ir.node import Node

Type = TensorType | TupleType


class IRTypeError(Exception):
    """An op applied to operands it cannot take: a bug in whatever built the graph."""


class EvalError(Exception):
    """An op's reference implementation cannot compute on the values it got (the interpreter names the node)."""


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

# Attribute kinds: how the verifier checks a value and the IR text parser reads one back.
ATTR_KINDS = ("int", "float", "bool", "str", "ints", "dim", "dims", "dtype", "type", "scalar")


_KIND_NAMES = {"int": "an integer", "float": "a number", "bool": "a truth value", "str": "a string",
               "ints": "a list of integers", "dim": "a size or a symbol", "dims": "a list of sizes or symbols",
               "dtype": "a DType", "type": "a TensorType", "scalar": "a scalar"}


@dataclass(frozen=True)
class Attr:
    name: str
    kind: str
    default: Any = REQUIRED
    choices: tuple[Any, ...] | None = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


class NodeMaker:
    """What a decomposition builds nodes with (passes/decompose.py provides it): `make(Op.ADD, a, b)`,
    `make.const(1.0, DType.float32)`. The registry cannot import Node, which types itself through it."""

    def __call__(self, op: Op, *src: Any, **attrs: Any) -> Any:
        raise NotImplementedError

    def const(self, value: Any, dtype: DType) -> Any:
        return self(Op.CONST, value=value, dtype=dtype)


# How an example draws an input's values: (generator, concrete shape) → array.
Values = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


def uniform(low: float, high: float) -> Values:
    """float32 values in [low, high): operands inside a function's domain (log, √) or away from 0 (a divisor)."""
    return lambda rng, shape: rng.uniform(low, high, shape).astype(np.float32)


def integers(low: int, high: int, dtype: type = np.int64) -> Values:
    """Integers in [low, high): indices, or whole-number floats (dtype=np.float32) that compare equal."""
    return lambda rng, shape: rng.integers(low, high, shape).astype(dtype)


class ExampleMaker(NodeMaker):
    """What an op's example builds its graph with (ir/examples.py provides it): nodes as NodeMaker makes
    them, and leaves. Shapes may name the run-time dims "batch", "seq" and "past", which the backends'
    tests bind to several sizes; a param's shape is fixed. Values are normal floats, fair bools, any
    uint8 and int64 in [−8, 8), unless `values` draws them."""

    def input(self, name: str, dtype: DType, *shape: Dim, values: Values | None = None) -> Any:
        raise NotImplementedError

    def param(self, name: str, dtype: DType, *shape: int, values: Values | None = None) -> Any:
        raise NotImplementedError


# An op's example: the nodes it computes, made with an ExampleMaker; each becomes an output.
Example = Callable[[ExampleMaker], Sequence[Any]]


# A position rule says how an op's output positions along a run-time dim come from its operands':
# the operand indices whose same positions it reads (every other operand is read whole), or why
# positions mix (a reduction over them, a product that sums over them).
PositionRule = Callable[["Node", str], "tuple[int, ...] | str"]


@dataclass(frozen=True)
class OpDef:
    op: Op
    doc: str
    arity: int | tuple[int, int | None]  # exactly n operands, or (at least, at most or None)
    infer: Callable[[Sequence[TensorType], Mapping[str, Any]], Type]
    impl: Callable[[Node, list[Any]], Any]
    attrs: tuple[Attr, ...] = ()
    elementwise: bool = False
    reduces: Callable[[Node], list[int]] | None = None  # the operand axes a reduction sums, maxes or averages away
    positions: PositionRule | None = None
    layout: str = "fixed"  # the layout rule of passes/layout_rules.py that applies ("fixed": identity only)
    precision: str = "half"  # under float16: "anchor" computes in fp32, "follower" joins an fp32 region
    decompose: Callable[[Node, NodeMaker], Any] | None = None
    vjp: Callable[..., Any] | None = None
    check: Callable[[Node], list[str]] | None = None  # verifier checks beyond arity, attributes and type
    inline: str | None = None  # the attribute the IR text writes right after the op name (param "W_e")
    implied: tuple[str, ...] = ()  # attributes the result type already says, left out of the IR text
    example: Example | None = None  # a small graph using the op, for every stage's tests (see ExampleMaker)
    # operands the op may write over (a backend may compute its result in their memory): the verifier requires
    # each to be a graph input that no other node reads and no output returns (buffered_attention's buffers)
    overwrites: tuple[int, ...] = ()

    def attr(self, name: str) -> Attr | None:
        return next((a for a in self.attrs if a.name == name), None)

    def accepts_arity(self, n: int) -> bool:
        if isinstance(self.arity, int):
            return n == self.arity
        lo, hi = self.arity
        return n >= lo and (hi is None or n <= hi)

    def describe_arity(self) -> str:
        if isinstance(self.arity, int):
            return str(self.arity)
        lo, hi = self.arity
        return f"at least {lo}" if hi is None else f"{lo} to {hi}"


OPS: dict[Op, OpDef] = {}


def register(*defs: OpDef) -> None:
    for d in defs:
        if d.op in OPS:
            raise ValueError(f"op {d.op.value} is defined twice")
        OPS[d.op] = d


def op_def(op: Op) -> OpDef:
    try:
        return OPS[op]
    except KeyError:
        raise IRTypeError(f"no definition for op {op}") from None


def infer_type(op: Op, src: Sequence[Type], attrs: Mapping[str, Any]) -> Type:
    """The result type of `op` on operands of types `src`; raises IRTypeError if ill-typed."""
    d = op_def(op)
    if not d.accepts_arity(len(src)):
        raise IRTypeError(f"{op.value} takes {d.describe_arity()} operands, got {len(src)}")
    if any(isinstance(t, TupleType) for t in src) and op is not Op.GET:
        raise IRTypeError(f"{op.value} of a tuple: take an element with get first")
    return d.infer(src, attrs)  # type: ignore[arg-type]


def attr_problem(op: Op, a: Attr, v: Any) -> str | None:
    """Why `v` is not a value of attribute `a`'s kind and choices; None if it is."""
    def is_int(x: Any) -> bool:
        return isinstance(x, int | np.integer) and not isinstance(x, bool | np.bool_)

    ok = {
        "int": lambda: is_int(v),
        "float": lambda: is_int(v) or isinstance(v, float | np.floating),
        "bool": lambda: isinstance(v, bool | np.bool_),
        "str": lambda: isinstance(v, str),
        "ints": lambda: isinstance(v, list | tuple) and all(is_int(x) for x in v),
        "dim": lambda: is_int(v) or isinstance(v, str),
        "dims": lambda: isinstance(v, list | tuple) and all(is_int(x) or isinstance(x, str) for x in v),
        "dtype": lambda: isinstance(v, DType),
        "type": lambda: isinstance(v, TensorType),
        "scalar": lambda: isinstance(v, int | float | bool | np.generic),
    }[a.kind]()
    if not ok:
        return f"{op.value} {a.name}={v!r} is not {_KIND_NAMES[a.kind]}"
    if a.choices is not None and v not in a.choices:
        return f"{op.value} {a.name}={v!r} is not one of {a.choices}"
    return None


# ---- helpers for typing rules


def axis_of(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise IRTypeError(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def scalar_int(t: TensorType, what: str) -> None:
    if t.shape != () or t.dtype != DType.int64:
        raise IRTypeError(f"{what} must be an int64 scalar, got {t}")


def broadcast_all(op: Op, types: Sequence[TensorType]) -> tuple[Dim, ...]:
    shape: tuple[Dim, ...] | None = ()
    for t in types:
        shape = broadcast_shapes(shape, t.shape) if shape is not None else None
    if shape is None:
        raise IRTypeError(f"{op.value}: shapes {[str(t) for t in types]} do not broadcast")
    return shape


def get_attr(attrs: Mapping[str, Any], d: OpDef, name: str) -> Any:
    """An attribute's value, or its declared default."""
    if name in attrs:
        return attrs[name]
    a = d.attr(name)
    if a is None or a.required:
        raise IRTypeError(f"{d.op.value} has no attribute {name}")
    return a.default
