"""Normalisations over one axis, made by the norm fusion (passes/rules/layer_norm.py, rms_norm.py).

    LAYER_NORM(x, γ, β; axis, eps) = (x − m) / √(v + ε) ⊙ γ + β    m, v: mean and variance along axis
    RMS_NORM(x, γ; axis, eps)      = x / √(mean(x²) + ε) ⊙ γ

γ and β are vectors of x.shape[axis]. Each decomposes into its formula, for a backend without a
kernel (ONNX before opset 23 has no RMSNormalization).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pseudoformer.ir.ops.op import Op
from pseudoformer.ir.ops.reductions import along_positions
from pseudoformer.ir.ops.registry import Attr, ExampleMaker, IRTypeError, NodeMaker, OpDef, axis_of, register
from pseudoformer.ir.types import DType, TensorType

_ATTRS = (Attr("axis", "int"), Attr("eps", "float"))


def _vectors_fit(x: TensorType, vectors: Sequence[TensorType], attrs: Mapping[str, Any], op: str) -> TensorType:
    ax = axis_of(attrs["axis"], x.rank)
    if any(v.shape != (x.shape[ax],) for v in vectors):
        names = "γ, β" if len(vectors) == 2 else "γ"
        raise IRTypeError(f"{op} over axis {ax} of {x} needs {names} of [{x.shape[ax]}], "
                          f"got {', '.join(str(v) for v in vectors)}")
    return x


def _along(x: np.ndarray, v: np.ndarray, axis: int) -> np.ndarray:
    shape = [1] * x.ndim
    shape[axis] = -1
    return v.reshape(shape)


def _layer_norm(n: Any, a: list[np.ndarray]) -> np.ndarray:
    x, g, b = a
    axis, eps = n.attrs["axis"] % x.ndim, n.attrs["eps"]
    m = x.mean(axis=axis, keepdims=True)
    v = ((x - m) ** 2).mean(axis=axis, keepdims=True)
    return ((x - m) / np.sqrt(v + np.asarray(eps, x.dtype)) * _along(x, g, axis) + _along(x, b, axis)).astype(x.dtype)


def _rms_norm(n: Any, a: list[np.ndarray]) -> np.ndarray:
    x, g = a
    axis, eps = n.attrs["axis"], n.attrs["eps"]
    r = (x * x).mean(axis=axis, keepdims=True)
    return (x / np.sqrt(r + np.asarray(eps, x.dtype)) * _along(x, g, axis % x.ndim)).astype(x.dtype)


def _broadcast_along(make: NodeMaker, v: Any, axis: int, rank: int) -> Any:
    """A vector over `axis` as a value that broadcasts against a rank-`rank` tensor."""
    trailing = list(range(1, rank - axis))
    return make(Op.UNSQUEEZE, v, axes=trailing) if trailing else v


def _mean(make: NodeMaker, x: Any, axis: int) -> Any:
    return make(Op.REDUCE_MEAN, x, axes=[axis], keepdims=True)


def _layer_norm_formula(n: Any, make: NodeMaker) -> Any:
    x, g, b = n.src
    rank, axis = x.type.rank, n.attrs["axis"] % x.type.rank
    centred = make(Op.SUB, x, _mean(make, x, axis))
    var = _mean(make, make(Op.MUL, centred, centred), axis)
    den = make(Op.SQRT, make(Op.ADD, var, make.const(float(n.attrs["eps"]), x.dtype)))
    scaled = make(Op.MUL, make(Op.DIV, centred, den), _broadcast_along(make, g, axis, rank))
    return make(Op.ADD, scaled, _broadcast_along(make, b, axis, rank))


def _rms_norm_formula(n: Any, make: NodeMaker) -> Any:
    x, g = n.src
    rank, axis = x.type.rank, n.attrs["axis"] % x.type.rank
    r = _mean(make, make(Op.MUL, x, x), axis)
    den = make(Op.SQRT, make(Op.ADD, r, make.const(float(n.attrs["eps"]), x.dtype)))
    return make(Op.MUL, make(Op.DIV, x, den), _broadcast_along(make, g, axis, rank))


def _example(op: Op) -> Callable[[ExampleMaker], list[Any]]:
    """Over the features of the paper's layout (a middle axis), and over the last axis, row-major."""
    def example(make: ExampleMaker) -> list[Any]:
        vectors = [make.param(v, DType.float32, 4) for v in ("g", "b")[:2 if op is Op.LAYER_NORM else 1]]
        x, rows = make.input("x", DType.float32, "batch", 4, "seq"), make.input("rows", DType.float32, "batch", "seq", 4)
        return [make(op, x, *vectors, axis=1, eps=1e-5), make(op, rows, *vectors, axis=-1, eps=1e-6),
                make(op, rows, *vectors, axis=2, eps=0.0)]

    return example


register(
    OpDef(Op.LAYER_NORM, "(x − m)/√(v + ε) ⊙ γ + β along an axis", 3,
          lambda src, attrs: _vectors_fit(src[0], src[1:], attrs, "layer_norm"), _layer_norm, attrs=_ATTRS,
          positions=along_positions, layout="normalise", decompose=_layer_norm_formula,
          example=_example(Op.LAYER_NORM)),
    OpDef(Op.RMS_NORM, "x/√(mean(x²) + ε) ⊙ γ along an axis", 2,
          lambda src, attrs: _vectors_fit(src[0], src[1:], attrs, "rms_norm"), _rms_norm, attrs=_ATTRS,
          positions=along_positions, layout="normalise", decompose=_rms_norm_formula,
          example=_example(Op.RMS_NORM)),
)
