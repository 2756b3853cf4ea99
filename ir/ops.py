"""The op set of the IR and each op's typing rule.

The literal lowering keeps the paper's layout: data tensors are [batch, features, positions]
(batch leading, added for deployment), parameters have no batch axis, and broadcasting follows
numpy/ONNX (right-aligned). Every op's result type is a function of its operand types and
attributes, given by `infer_type`; the verifier and the interpreter both rely on it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any

from pseudoformer.ir.types import Dim, DType, TensorType, broadcast_shapes


class Op(enum.Enum):
    # leaves
    INPUT = "input"  # attrs: name, type — a model input
    PARAM = "param"  # attrs: name, type — a weight, bound from a checkpoint or initialised
    CONST = "const"  # attrs: value (python scalar), dtype — a scalar constant
    # unary elementwise
    NEG = "neg"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    TANH = "tanh"
    ERF = "erf"
    SIN = "sin"
    COS = "cos"
    ABS = "abs"
    RELU = "relu"
    GELU = "gelu"  # attrs: approximate ("none" = exact erf form, "tanh")
    NOT = "not"
    CAST = "cast"  # attrs: dtype
    # binary elementwise, broadcasting
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    POW = "pow"
    MAX = "max"
    MIN = "min"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    EQ = "eq"
    NE = "ne"
    AND = "and"
    OR = "or"
    WHERE = "where"  # (cond, a, b)
    # structure
    MATMUL = "matmul"  # numpy matmul of two tensors of rank >= 2, batch dims broadcast
    TRANSPOSE = "transpose"  # attrs: perm
    UNSQUEEZE = "unsqueeze"  # attrs: axes (sorted, in output coordinates)
    SQUEEZE = "squeeze"  # attrs: axes (sorted, in input coordinates; those dims must be 1)
    RESHAPE = "reshape"  # attrs: shape (dims; symbolic dims are taken from the operand at run time)
    CONCAT = "concat"  # attrs: axis
    REDUCE_SUM = "reduce_sum"  # attrs: axes, keepdims
    REDUCE_MAX = "reduce_max"  # attrs: axes, keepdims
    REDUCE_MEAN = "reduce_mean"  # attrs: axes, keepdims
    SOFTMAX = "softmax"  # attrs: axis
    GATHER = "gather"  # (data, indices int64), attrs: axis — numpy.take
    # sizes and index sets known only at run time
    DIM = "dim"  # (x), attrs: axis — int64 scalar, the run-time size of x's axis
    ARANGE = "arange"  # (n int64 scalar), attrs: dim — int64[dim] holding 0 … n−1
    SLICE = "slice"  # (x, start, stop int64 scalars), attrs: axis, dim — x[start:stop] on axis
    INDEX_MASK = "index_mask"  # (rows, cols int64 scalars), attrs: rel, dims — bool[r, c], i rel j
    # fused ops, made by passes (the frontend never emits them)
    LAYER_NORM = "layer_norm"  # (x, γ, β), attrs: axis, eps — normalise x over one axis; γ, β: [x.shape[axis]]
    RMS_NORM = "rms_norm"  # (x, γ), attrs: axis, eps — x / √(mean(x²) + ε) ⊙ γ over one axis; γ: [x.shape[axis]]
    ATTENTION = "attention"  # (q, k, v[, mask]), attrs: scale, causal — softmax(q kᵀ·scale) v over the last
    # two axes: q [..., s_q, d], k [..., s_k, d], v [..., s_k, d_v] → [..., s_q, d_v]; the optional bool
    # mask, broadcast to [..., s_q, s_k], is True where a query may attend. causal: query i sees key j
    # iff j ≤ i + s_k − s_q —
    # the queries are the last s_q of the s_k positions (bottom-right aligned), so a decode step whose
    # keys include a cache of earlier positions means the same thing as the full run (s_q = s_k).


UNARY = {Op.NEG, Op.EXP, Op.LOG, Op.SQRT, Op.TANH, Op.ERF, Op.SIN, Op.COS, Op.ABS, Op.RELU, Op.GELU}
ARITH = {Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.MAX, Op.MIN}
COMPARE = {Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE}
LOGICAL = {Op.AND, Op.OR}
RELATIONS = {"<": Op.LT, "<=": Op.LE, ">": Op.GT, ">=": Op.GE, "==": Op.EQ, "!=": Op.NE}

ARITY: dict[Op, int] = {Op.INPUT: 0, Op.PARAM: 0, Op.CONST: 0, Op.WHERE: 3, Op.SLICE: 3}
for _op in UNARY | {Op.NOT, Op.CAST, Op.TRANSPOSE, Op.UNSQUEEZE, Op.SQUEEZE, Op.RESHAPE, Op.SOFTMAX,
                    Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MEAN, Op.DIM, Op.ARANGE}:
    ARITY[_op] = 1
for _op in ARITH | COMPARE | LOGICAL | {Op.MATMUL, Op.GATHER, Op.INDEX_MASK}:
    ARITY[_op] = 2
ARITY[Op.LAYER_NORM] = 3
ARITY[Op.RMS_NORM] = 2


class IRTypeError(Exception):
    """An op applied to operands it cannot take: a bug in whatever built the graph."""


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise IRTypeError(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def _scalar_int(t: TensorType, what: str) -> None:
    if t.shape != () or t.dtype != DType.int64:
        raise IRTypeError(f"{what} must be an int64 scalar, got {t}")


def infer_type(op: Op, src: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    """The result type of `op` on operands of types `src`; raises IRTypeError if ill-typed."""
    want = ARITY.get(op, -1)
    if want >= 0 and len(src) != want:
        raise IRTypeError(f"{op.value} takes {want} operands, got {len(src)}")
    if op in (Op.INPUT, Op.PARAM):
        return attrs["type"]
    if op is Op.CONST:
        return TensorType(attrs["dtype"], ())
    if op in UNARY:
        if not src[0].dtype.is_float:
            raise IRTypeError(f"{op.value} needs a float operand, got {src[0]}")
        return src[0]
    if op is Op.NOT:
        if src[0].dtype is not DType.bool:
            raise IRTypeError(f"not needs a bool operand, got {src[0]}")
        return src[0]
    if op is Op.CAST:
        return TensorType(attrs["dtype"], src[0].shape)
    if op in ARITH | COMPARE | LOGICAL or op is Op.WHERE:
        operands = src[1:] if op is Op.WHERE else src
        if op is Op.WHERE and src[0].dtype is not DType.bool:
            raise IRTypeError(f"where's condition must be bool, got {src[0]}")
        if operands[0].dtype != operands[1].dtype:
            raise IRTypeError(f"{op.value} on mixed dtypes {operands[0]} and {operands[1]}")
        if op in LOGICAL and operands[0].dtype is not DType.bool:
            raise IRTypeError(f"{op.value} needs bool operands")
        shape: tuple[Dim, ...] | None = ()
        for t in src:
            shape = broadcast_shapes(shape, t.shape) if shape is not None else None
        if shape is None:
            raise IRTypeError(f"{op.value}: shapes {[str(t) for t in src]} do not broadcast")
        dtype = DType.bool if op in COMPARE else operands[0].dtype
        return TensorType(dtype, shape)
    if op is Op.MATMUL:
        a, b = src
        if a.rank < 2 or b.rank < 2:
            raise IRTypeError(f"matmul needs rank >= 2 operands, got {a} and {b}")
        if a.dtype != b.dtype:
            raise IRTypeError(f"matmul on mixed dtypes {a} and {b}")
        if a.shape[-1] != b.shape[-2]:
            raise IRTypeError(f"matmul inner dims differ: {a} @ {b}")
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
        if batch is None:
            raise IRTypeError(f"matmul batch dims do not broadcast: {a} @ {b}")
        return TensorType(a.dtype, (*batch, a.shape[-2], b.shape[-1]))
    if op is Op.TRANSPOSE:
        perm = tuple(attrs["perm"])
        if sorted(perm) != list(range(src[0].rank)):
            raise IRTypeError(f"bad permutation {perm} for {src[0]}")
        return TensorType(src[0].dtype, tuple(src[0].shape[p] for p in perm))
    if op is Op.UNSQUEEZE:
        rank = src[0].rank + len(attrs["axes"])
        dims = list(src[0].shape)
        for ax in sorted(_axis(a, rank) for a in attrs["axes"]):
            dims.insert(ax, 1)
        return TensorType(src[0].dtype, tuple(dims))
    if op is Op.SQUEEZE:
        axes = {_axis(a, src[0].rank) for a in attrs["axes"]}
        if any(src[0].shape[a] != 1 for a in axes):
            raise IRTypeError(f"squeeze of non-unit axes {sorted(axes)} of {src[0]}")
        return TensorType(src[0].dtype, tuple(d for i, d in enumerate(src[0].shape) if i not in axes))
    if op is Op.RESHAPE:
        return TensorType(src[0].dtype, tuple(attrs["shape"]))
    if op is Op.CONCAT:
        if not src:
            raise IRTypeError("concat of nothing")
        ax = _axis(attrs["axis"], src[0].rank)
        total: Dim = 0
        for t in src:
            if t.rank != src[0].rank or t.dtype != src[0].dtype:
                raise IRTypeError(f"concat of {t} with {src[0]}")
            if any(t.shape[i] != src[0].shape[i] for i in range(t.rank) if i != ax):
                raise IRTypeError(f"concat on axis {ax}: {t} and {src[0]} differ elsewhere")
            d = t.shape[ax]
            if isinstance(total, int) and isinstance(d, int):
                total += d
            else:  # the first symbolic part starts the sum, so no phantom "0+" prefix
                total = d if total == 0 else f"{total}+{d}"
        return TensorType(src[0].dtype, src[0].shape[:ax] + (total,) + src[0].shape[ax + 1:])
    if op in (Op.REDUCE_SUM, Op.REDUCE_MAX, Op.REDUCE_MEAN):
        if op is not Op.REDUCE_MAX and src[0].dtype is DType.bool:
            raise IRTypeError(f"{op.value} of bool {src[0]}: cast to a number first")
        axes = {_axis(a, src[0].rank) for a in attrs["axes"]}
        keep = attrs.get("keepdims", False)
        dims = tuple(1 if i in axes else d for i, d in enumerate(src[0].shape) if keep or i not in axes)
        return TensorType(src[0].dtype, dims)
    if op is Op.SOFTMAX:
        _axis(attrs["axis"], src[0].rank)
        return src[0]
    if op is Op.GATHER:
        data, idx = src
        if idx.dtype is not DType.int64:
            raise IRTypeError(f"gather indices must be int64, got {idx}")
        ax = _axis(attrs["axis"], data.rank)
        return TensorType(data.dtype, data.shape[:ax] + idx.shape + data.shape[ax + 1:])
    if op is Op.DIM:
        _axis(attrs["axis"], src[0].rank)
        return TensorType(DType.int64, ())
    if op is Op.ARANGE:
        _scalar_int(src[0], "arange's bound")
        return TensorType(DType.int64, (attrs["dim"],))
    if op is Op.SLICE:
        _scalar_int(src[1], "slice start")
        _scalar_int(src[2], "slice stop")
        ax = _axis(attrs["axis"], src[0].rank)
        return TensorType(src[0].dtype, src[0].shape[:ax] + (attrs["dim"],) + src[0].shape[ax + 1:])
    if op is Op.INDEX_MASK:
        _scalar_int(src[0], "mask rows")
        _scalar_int(src[1], "mask cols")
        if attrs["rel"] not in RELATIONS:
            raise IRTypeError(f"unknown relation {attrs['rel']!r}")
        return TensorType(DType.bool, tuple(attrs["dims"]))
    if op is Op.LAYER_NORM:
        x, g, b = src
        ax = _axis(attrs["axis"], x.rank)
        if g.shape != (x.shape[ax],) or b.shape != (x.shape[ax],):
            raise IRTypeError(f"layer_norm over axis {ax} of {x} needs γ, β of [{x.shape[ax]}], got {g}, {b}")
        return x
    if op is Op.RMS_NORM:
        x, g = src
        ax = _axis(attrs["axis"], x.rank)
        if g.shape != (x.shape[ax],):
            raise IRTypeError(f"rms_norm over axis {ax} of {x} needs γ of [{x.shape[ax]}], got {g}")
        return x
    if op is Op.ATTENTION:
        if len(src) not in (3, 4):
            raise IRTypeError(f"attention takes 3 or 4 operands, got {len(src)}")
        q, k, v = src[:3]
        if min(q.rank, k.rank, v.rank) < 2 or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
            raise IRTypeError(f"attention of q {q}, k {k}, v {v}")
        lead = broadcast_shapes(q.shape[:-2], k.shape[:-2])
        if lead is None:
            raise IRTypeError(f"attention batch dims do not broadcast: {q}, {k}")
        scores = (*lead, q.shape[-2], k.shape[-2])
        # The mask broadcasts to the scores: [s_q, s_k] for every example and head, or per example
        # ([batch, 1, 1, s_k], a padding mask over the keys).
        if len(src) == 4 and (src[3].dtype is not DType.bool or src[3].rank > len(scores)
                              or broadcast_shapes(src[3].shape, scores) != scores):
            raise IRTypeError(f"attention mask must be bool and broadcast to [{', '.join(map(str, scores))}], "
                              f"got {src[3]}")
        return TensorType(q.dtype, (*lead, q.shape[-2], v.shape[-1]))
    raise IRTypeError(f"no typing rule for {op}")
