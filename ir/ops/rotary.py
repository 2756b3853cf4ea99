"""Rotary position embedding (Su et al., 2021), made by the rotary fusion (passes/rules/rotary.py).

    ROTARY(x, c, s; axis) = [x₁ ⊙ c − x₂ ⊙ s ; x₂ ⊙ c + x₁ ⊙ s]    along axis

x₁ and x₂ are the two halves of x along `axis` (coordinates i and i + d/2 are rotated together: the
"rotate half" pairing of HuggingFace's Llama), and c = cos θ, s = sin θ, the angles of each pair at
each position, broadcast against x₁. The angles are operands, computed in the graph from the positions,
so the key/value cache's derivation continues them after the prompt like any other use of positions.

Packed form (heads = H > 0): x is [.., H·d] with `axis` its last, each head's d coordinates rotated
on their own, and c, s [.., d/2] are shared by the heads (they broadcast against x viewed as
[.., H, d/2] without its head axis), as ONNX's RotaryEmbedding takes a 3-D input.

Partial rotation (rotary_dim = r > 0, ONNX's rotary_embedding_dim): only the first r coordinates of
`axis` (of each head, when packed) are rotated, as halves of r/2, and the rest pass as they are
(GPT-NeoX's rotary_pct); c and s then broadcast against [.., r/2].
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.movement import along_axis
from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.registry import (
    Attr,
    ExampleMaker,
    IRTypeError,
    NodeMaker,
    OpDef,
    axis_of,
    register,
    uniform,
)
from pseudoformer.ir.types import DType, TensorType, broadcast_shapes


def _half_shape(x: TensorType, axis: int, heads: int, rotary_dim: int = 0) -> tuple:
    """The shape c and s broadcast against: x's halves (per head, without the head axis when packed), or
    the halves of its first rotary_dim coordinates."""
    ax = axis_of(axis, x.rank)
    width = x.shape[ax]
    groups = max(heads, 1)
    if not isinstance(width, int) or width % (2 * groups):
        raise IRTypeError(f"rotary along axis {ax} of {x}: the axis must hold {groups} head(s) of an even size")
    if heads and ax != x.rank - 1:
        raise IRTypeError(f"packed rotary rotates the last axis, not axis {ax} of {x}")
    if rotary_dim and (rotary_dim % 2 or rotary_dim > width // groups or rotary_dim < 0):
        raise IRTypeError(f"rotary of {x}: rotary_dim {rotary_dim} must be even and at most a head's {width // groups}")
    return x.shape[:ax] + ((rotary_dim or width // groups) // 2,) + x.shape[ax + 1:]


def _rotary_type(src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x, c, s = src
    half = _half_shape(x, attrs["axis"], int(attrs.get("heads", 0)), int(attrs.get("rotary_dim", 0)))
    for what, t in (("cos", c), ("sin", s)):
        if t.dtype != x.dtype or broadcast_shapes(t.shape, half) != half:
            raise IRTypeError(f"rotary of {x}: its {what} {t} must be {x.dtype.value} and broadcast to {list(half)}")
    return x


def rotate(x: np.ndarray, c: np.ndarray, s: np.ndarray, axis: int, heads: int = 0,
           rotary_dim: int = 0) -> np.ndarray:
    if heads:
        lead = x.shape[:-1]
        y = rotate(x.reshape(*lead, heads, -1), np.expand_dims(c, -2), np.expand_dims(s, -2), -1,
                   rotary_dim=rotary_dim)
        return y.reshape(x.shape)
    if rotary_dim and rotary_dim != x.shape[axis]:
        head, rest = np.split(x, [rotary_dim], axis=axis)
        return np.concatenate([rotate(head, c, s, axis), rest], axis=axis)
    x1, x2 = np.split(x, 2, axis=axis)
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=axis).astype(x.dtype)


def _positions(n: Any, dim: str) -> tuple[int, ...] | str:
    # Each position is rotated by its own angles: position t of the result reads position t of all three.
    return "a rotation along the position axis" if along_axis(n, dim) else (0, 1, 2)


def _rotary(n: Any, a: list[np.ndarray]) -> np.ndarray:
    return rotate(*a, n.attrs["axis"], int(n.attrs.get("heads", 0)), int(n.attrs.get("rotary_dim", 0)))


def _formula(make: NodeMaker, x: Any, c: Any, s: Any, axis: int, rotary_dim: int = 0) -> Any:
    width = x.shape[axis]
    if rotary_dim and rotary_dim != width:  # [rotate(x[:r]); x[r:]]
        def cut(lo: int, hi: int) -> Any:
            return make(Op.SLICE, x, make.const(lo, DType.int64), make.const(hi, DType.int64), axis=axis, dim=hi - lo)
        return make(Op.CONCAT, _formula(make, cut(0, rotary_dim), c, s, axis), cut(rotary_dim, width), axis=axis)
    half = width // 2

    def part(start: int) -> Any:
        bounds = (make.const(start, DType.int64), make.const(start + half, DType.int64))
        return make(Op.SLICE, x, *bounds, axis=axis, dim=half)

    x1, x2 = part(0), part(half)
    y1 = make(Op.SUB, make(Op.MUL, x1, c), make(Op.MUL, x2, s))
    y2 = make(Op.ADD, make(Op.MUL, x2, c), make(Op.MUL, x1, s))
    return make(Op.CONCAT, y1, y2, axis=axis)


def _rotary_formula(n: Any, make: NodeMaker) -> Any:
    x, c, s = n.src
    heads, r = int(n.attrs.get("heads", 0)), int(n.attrs.get("rotary_dim", 0))
    if not heads:
        return _formula(make, x, c, s, n.attrs["axis"] % x.type.rank, r)
    *lead, width = x.shape
    split = make(Op.RESHAPE, x, shape=[*lead, heads, width // heads])
    c, s = (make(Op.UNSQUEEZE, t, axes=[t.type.rank - 1]) for t in (c, s))
    return make(Op.RESHAPE, _formula(make, split, c, s, len(lead) + 1, r), shape=list(x.shape))


def _example(make: ExampleMaker) -> list[Any]:
    """Angles [seq, 3]: the rotation of x's 6 rows (the paper's layout), of q's 4 columns per head, and of
    q3's 3 heads of 2, packed; partially: the first 2 of x's rows, of q's 4 columns, and of the 4 of each
    of q3's 3 heads."""
    f32 = DType.float32
    ang = make.input("ang", f32, "seq", 3, values=uniform(-4, 4))
    cos, sin = make(Op.COS, ang), make(Op.SIN, ang)

    def first(t: Any, n: int) -> Any:
        return make(Op.SLICE, t, make.const(0, DType.int64), make.const(n, DType.int64), axis=1, dim=n)

    x, q = make.input("x", f32, "batch", 6, "seq"), make.input("q", f32, "batch", 2, "seq", 4)
    q3 = make.input("q3", f32, "batch", "seq", 6)
    return [make(Op.ROTARY, x, make(Op.TRANSPOSE, cos, perm=(1, 0)), make(Op.TRANSPOSE, sin, perm=(1, 0)), axis=1),
            make(Op.ROTARY, q, first(cos, 2), first(sin, 2), axis=3),
            make(Op.ROTARY, q3, first(cos, 1), first(sin, 1), axis=-1, heads=3),
            make(Op.ROTARY, x, make(Op.TRANSPOSE, first(cos, 1), perm=(1, 0)),
                 make(Op.TRANSPOSE, first(sin, 1), perm=(1, 0)), axis=1, rotary_dim=2),
            make(Op.ROTARY, q, first(cos, 1), first(sin, 1), axis=3, rotary_dim=2),
            make(Op.ROTARY, make(Op.CONCAT, q3, q3, axis=2), first(cos, 1), first(sin, 1), axis=-1, heads=3,
                 rotary_dim=2)]


register(
    OpDef(Op.ROTARY, "[x₁ c − x₂ s; x₂ c + x₁ s]: pairs (i, i + d/2) rotated by their angles", 3, _rotary_type,
          _rotary, attrs=(Attr("axis", "int"), Attr("heads", "int", 0), Attr("rotary_dim", "int", 0)),
          positions=_positions, layout="rotary", precision="follower", decompose=_rotary_formula,
          example=_example),
)
