"""One slotted node class: an op, its ordered operands, attributes, a type and where it came from."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pseudoformer.ir.ops import NodeMaker, Op, infer_type
from pseudoformer.ir.types import DType, Span, TensorType, TupleType


class Node:
    """An SSA value. Identity is object identity; operand order is kept in `src` (x*x has src (x, x))."""

    __slots__ = ("op", "src", "attrs", "type", "span", "scope")

    def __init__(
        self,
        op: Op,
        src: tuple[Node, ...] = (),
        attrs: Mapping[str, Any] | None = None,
        *,
        span: Span | None = None,
        scope: str = "",
        type: TensorType | TupleType | None = None,
    ) -> None:
        self.op = op
        self.src = tuple(src)
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.type = type if type is not None else infer_type(op, [s.type for s in self.src], self.attrs)
        self.span = span
        # The algorithm-call path that produced the node, e.g. "GPT2/layers.3/MHAttention/heads.0".
        self.scope = scope

    @classmethod
    def at(cls, like: Node, op: Op, src: tuple[Node, ...] = (), attrs: Mapping[str, Any] | None = None, *,
           type: TensorType | TupleType | None = None) -> Node:
        """A node that stands where `like` stood in the source: `like`'s span and scope stamped on it. Every
        rewrite builds its nodes with this, so that a diagnostic, `inspect --refusals` and the viewer place a
        fused or moved node at the user's line and inside the algorithm call it came from."""
        return cls(op, src, attrs, span=like.span, scope=like.scope, type=type)

    @property
    def shape(self) -> tuple:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def name(self) -> str | None:
        return self.attrs.get("name")

    def key(self) -> tuple:
        """Structural identity for CSE: op, operand identities and attributes."""
        return (self.op, tuple(id(s) for s in self.src), _freeze(self.attrs))

    def walk(self, seen: set[int] | None = None) -> Iterator[Node]:
        """This node and everything it depends on, operands before users, each once.

        `seen`: ids of nodes already walked (with everything they depend on), skipped and added to."""
        seen = set() if seen is None else seen
        stack: list[tuple[Node, bool]] = [(self, False)]
        while stack:
            n, expanded = stack.pop()
            if expanded:
                yield n
                continue
            if id(n) in seen:
                continue
            seen.add(id(n))
            stack.append((n, True))
            for s in reversed(n.src):
                if id(s) not in seen:
                    stack.append((s, False))

    def __repr__(self) -> str:
        return f"Node({self.op.value}, {self.type})"


def _freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v


class NodeBuilder(NodeMaker):
    """Builds nodes stamped with `like`'s span and scope: `make = NodeBuilder(root); make(Op.ADD, a, b, axis=1)`,
    the calling form of decompositions and vjps (ir/ops). Passes build their nodes with this or `Node.at`, never
    stamping by hand; `like` None builds unplaced nodes, and `like` may move along (the autodiff stamps each
    backward node with the forward node it differentiates)."""

    def __init__(self, like: Node | None = None) -> None:
        self.like = like

    def __call__(self, op: Op, *src: Any, **attrs: Any) -> Node:
        if self.like is None:
            return Node(op, src, attrs)
        return Node.at(self.like, op, src, attrs)

