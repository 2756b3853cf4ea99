"""The table of a backend's lowerings: for each IR op, the function that lowers its nodes and which of them it takes.

Both backends keep one (backends/onnx/lowerings/registry.py, backends/tvm/lowerings/registry.py) and
fill it from their family modules with `@table.lowers(Op.X, when=...)`. `when` refuses the nodes a
kernel cannot take (an opset before the ONNX op existed, an axis TVM's legalization gets wrong); the
backend's `accepts` then says no and the decompose pass replaces the node by its formula. Each backend
passes `when` its own context after the node (ONNX the opset, TVM nothing).

An op lowered twice is refused when the second module registers it: which of two lowerings wins must
never depend on the order the family modules happen to be imported in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Lowering(Generic[F]):
    fn: F
    when: Callable[..., bool] | None = None  # (node, *the backend's context) → whether fn takes the node

    def accepts(self, n: Node, *context: Any) -> bool:
        return self.when is None or self.when(n, *context)


class LoweringTable(Mapping[Op, Lowering[F]]):
    """One backend's lowerings by op; read-only but for `lowers`, which refuses an op already lowered."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self._by_op: dict[Op, Lowering[F]] = {}

    def lowers(self, *ops: Op, when: Callable[..., bool] | None = None) -> Callable[[F], F]:
        """Decorate the function that lowers nodes of `ops` (those `when` accepts, if given)."""
        if not ops:
            raise ValueError(f"a {self.backend} lowering names no op")

        def register(fn: F) -> F:
            for op in ops:
                old = self._by_op.get(op)
                if old is not None:
                    raise ValueError(f"two {self.backend} lowerings of {op.value}: "
                                     f"{_where(old.fn)} and {_where(fn)}")
            for op in ops:
                self._by_op[op] = Lowering(fn, when)
            return fn
        return register

    def accepts(self, n: Node, *context: Any) -> bool:
        """Whether the backend lowers node n itself (else the decompose pass replaces it by its formula)."""
        lowering = self._by_op.get(n.op)
        return lowering is not None and lowering.accepts(n, *context)

    def __getitem__(self, op: Op) -> Lowering[F]:
        return self._by_op[op]

    def __iter__(self) -> Iterator[Op]:
        return iter(self._by_op)

    def __len__(self) -> int:
        return len(self._by_op)


def _where(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
