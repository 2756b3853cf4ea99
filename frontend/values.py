"""Values of the elaborator: IR nodes with the paper's view of them.

A `Val` is a tensor whose axes are labelled: the deployment batch axis (leading, data only), the
paper's dims (a vector has one, a matrix two: features × positions) and free index variables —
the `t` of `for t ∈ [ℓ] : …` or the `i` of `Σ_i`. Column maps are vectorised by carrying `t` as an
axis instead of looping, so `X[:, t]` under a map is X itself with its last axis renamed `t`.
Layout: [batch?] + dims + free vars, in that order.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from pseudoformer.base.limits import MAX_NODES
from pseudoformer.frontend.sizes import Size
from pseudoformer.ir import DType, Node, Op, Span


@dataclass(frozen=True)
class Val:
    node: Node
    kind: str  # "real", "bool", "token" (0-based id), "index" (0-based position)
    dims: tuple[Size, ...] = ()
    free: tuple[tuple[str, Size], ...] = ()  # (variable, size) per trailing axis
    batched: bool = False
    const: Any = None  # a Python value when known at compile time (folds Mask ≡ 1 away)

    @property
    def free_vars(self) -> tuple[str, ...]:
        return tuple(v for v, _ in self.free)

    def free_size(self, var: str) -> Size | None:
        return dict(self.free).get(var)

    @property
    def paper_axis0(self) -> int:
        return 1 if self.batched else 0


@dataclass(frozen=True)
class SizeVal:
    """A count known as a size (ℓ ← length(x)); `node` reads it at run time."""

    size: Size
    node: Node | None = None


@dataclass
class Family:
    """Values named with an index script, assigned one member at a time in an unrolled loop (Yʰ)."""

    members: dict[int, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MaskDef:
    """`Mask[t, t'] = [[t ≤ t']]`: an entry-wise definition, evaluated once the mask's shape is known."""

    vars: tuple[str, ...]
    body: Any  # Expr
    frame: Any  # the defining frame, for names in the body


Label = tuple[str, Any]  # ("b", None) | ("d", i) | ("f", var)


def labels(v: Val) -> list[Label]:
    out: list[Label] = [("b", None)] if v.batched else []
    out += [("d", i) for i in range(len(v.dims))]
    out += [("f", name) for name, _ in v.free]
    return out


class NodeLimit(Exception):
    """The graph grew past Builder.max_nodes; the statement being elaborated reports it at its place."""


class Builder:
    """Creates IR nodes with the current source span and scope, and solves unknown sizes."""

    def __init__(self, max_nodes: int = MAX_NODES) -> None:
        self.max_nodes = max_nodes
        self.nodes = 0  # created so far, dead ones included: what elaborating costs
        self.span: Span | None = None
        self.scope: str = ""
        self.solved: dict[str, Size] = {}
        self.with_unknowns: list[Node] = []
        self.run_dims: dict[str, Node] = {}  # runtime size name → node computing it
        # runtime size name → (its largest value, why): W_p[:, t] for t ∈ [ℓ] needs ℓ ≤ ℓ_max
        self.limits: dict[str, tuple[int, str]] = {}
        # each call's scope → where its caller wrote it, so that a note about a node of a shared algorithm
        # can point at the user's line (`inspect --refusals`)
        self.call_sites: dict[str, Span] = {}
        self.counter = 0
        # a model's random draws (frontend/draws.py), each an input and its probability, where the graph is
        # elaborated for training; None: for inference, where a draw is its expectation
        self.draws: list[tuple[Node, float]] | None = None

    def node(self, op: Op, *src: Node, type: Any = None, **attrs: Any) -> Node:
        if op in (Op.INPUT, Op.PARAM):
            attrs["type"] = type  # leaves carry their type as an attribute (ir/ops/leaves.py)
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise NodeLimit()
        n = Node(op, tuple(src), attrs, span=self.span, scope=self.scope, type=type)
        if any(isinstance(d, str) and "?" in d for d in n.type.shape):
            self.with_unknowns.append(n)
        return n

    def const(self, value: float | int | bool, dtype: DType = DType.float32) -> Node:
        return self.node(Op.CONST, value=value, dtype=dtype)

    def fresh(self, base: str) -> str:
        self.counter += 1
        return f"{base}#{self.counter}"

    def resolve(self, s: Size) -> Size:
        for _ in range(8):
            if not s.unknowns & self.solved.keys():
                return s
            s = s.subst(self.solved)
        return s

    def solve(self, unknown: str, value: Size) -> None:
        self.solved[unknown] = value
        env = {k: self.resolve(v) for k, v in self.solved.items()}
        for n in self.with_unknowns:
            shape = tuple(
                Size.parse(d).subst(env).dim() if isinstance(d, str) and "?" in d else d for d in n.type.shape
            )
            n.type = replace(n.type, shape=shape)
            if "type" in n.attrs:  # INPUT/PARAM carry their type as an attribute too
                n.attrs["type"] = n.type
            d = n.attrs.get("dim")
            if isinstance(d, str) and "?" in d:  # only single unknown names reach here
                n.attrs["dim"] = Size.of(d).subst(env).dim()
            if "shape" in n.attrs:
                n.attrs["shape"] = n.type.shape


def dim(s: Size) -> int | str:
    return s.dim()
