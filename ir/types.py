"""Tensor types: a dtype and a shape whose dims are ints or symbolic names bound at run time."""

from __future__ import annotations

import enum
from dataclasses import dataclass

# A dim is a concrete size or the name of a size known only at run time ("batch", "seq").
Dim = int | str


class DType(enum.Enum):
    float32 = "float32"
    float16 = "float16"
    float64 = "float64"  # only for checking gradients against finite differences (tests); no frontend makes it
    int64 = "int64"
    uint8 = "uint8"  # packed block-quantized weights (ir/ops/quantized.py)
    bool = "bool"

    @property
    def is_float(self) -> bool:
        return self in (DType.float32, DType.float16, DType.float64)


@dataclass(frozen=True, slots=True)
class Span:
    """Where in the source a node came from: 1-based line and column."""

    file: str
    line: int
    col: int
    end_line: int = 0
    end_col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True, slots=True)
class TensorType:
    dtype: DType
    shape: tuple[Dim, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        return f"{self.dtype.value}[{', '.join(str(d) for d in self.shape)}]"


@dataclass(frozen=True, slots=True)
class TupleType:
    """The type of an op with several results (attention that also returns its key/value cache); its
    elements are taken apart with `get`."""

    types: tuple[TensorType, ...]

    @property
    def rank(self) -> int:
        # A tuple has no axes of its own: to passes that lay out or slice axes it is a fixed rank-0 value.
        return 0

    @property
    def shape(self) -> tuple[()]:
        return ()

    def __str__(self) -> str:
        return "(" + ", ".join(str(t) for t in self.types) + ")"


def broadcast_shapes(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[Dim, ...] | None:
    """numpy/ONNX multidirectional broadcasting over symbolic dims; None when incompatible."""
    out: list[Dim] = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(reversed(out))
