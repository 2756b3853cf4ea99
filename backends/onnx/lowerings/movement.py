"""Data movement → ONNX: Transpose, Unsqueeze, Squeeze, Reshape (run-time dims read off the operand),
Concat, Gather, ScatterElements, ScatterND (a scatter-add), Slice, and the elements of a tuple."""

from __future__ import annotations

from pseudoformer.backends.onnx.emitter import Emitter
from pseudoformer.backends.onnx.lowerings.registry import lowers
from pseudoformer.backends.onnx.lowerings.sizes import reads_length
from pseudoformer.base.errors import BackendError
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op


@lowers(Op.TRANSPOSE)
def _transpose(e: Emitter, n: Node) -> str:
    return e.emit("Transpose", [e.value(n.src[0])], out=e.out, perm=list(n.attrs["perm"]))


@lowers(Op.UNSQUEEZE, Op.SQUEEZE)
def _unit_axes(e: Emitter, n: Node) -> str:
    op_type = "Unsqueeze" if n.op is Op.UNSQUEEZE else "Squeeze"
    return e.emit(op_type, [e.value(n.src[0]), e.ints(sorted(n.attrs["axes"]))], out=e.out)


@lowers(Op.CONCAT)
def _concat(e: Emitter, n: Node) -> str:
    return e.emit("Concat", [e.value(s) for s in n.src], out=e.out, axis=n.attrs["axis"])


@lowers(Op.GATHER)
def _gather(e: Emitter, n: Node) -> str:
    return e.emit("Gather", [e.value(n.src[0]), e.value(n.src[1])], out=e.out, axis=n.attrs["axis"])


@lowers(Op.SCATTER)
def _scatter(e: Emitter, n: Node) -> str:
    # ScatterElements wants one index per updated element: the positions, spread over the other axes
    data, idx, upd = n.src
    axis = n.attrs["axis"] % data.type.rank
    shape = [1] * data.type.rank
    shape[axis] = -1
    if idx.type.rank == 2:
        shape[0] = 0  # positions per row: Reshape's 0 keeps the row axis
    column = e.emit("Reshape", [e.value(idx), e.ints(shape)])
    every = e.emit("Expand", [column, e.emit("Shape", [e.value(upd)])])
    return e.emit("ScatterElements", [e.value(data), every, e.value(upd)], out=e.out, axis=axis)


@lowers(Op.SCATTER_ADD)
def _scatter_add(e: Emitter, n: Node) -> str:
    # ScatterND scatters along leading axes: the data's axis moved first, the updates' index axes
    # moved first (then the data's other axes in order), and the sum moved back. Repeated indices add up.
    data, idx, upd = n.src
    rank, r = data.type.rank, idx.type.rank
    axis = n.attrs["axis"] % rank
    after = list(data.shape[axis + 1:])
    if axis and all(isinstance(d, int) for d in after):
        return _scatter_add_along(e, n, axis, after)
    to_front = [axis, *(i for i in range(rank) if i != axis)]
    upd_perm = [*range(axis, axis + r), *range(axis), *range(axis + r, upd.type.rank)]
    front = e.emit("Transpose", [e.value(data)], perm=to_front) if axis else e.value(data)
    rows = e.emit("Transpose", [e.value(upd)], perm=upd_perm) if axis else e.value(upd)
    at = e.emit("Unsqueeze", [e.value(idx), e.ints([r])])
    if not axis:
        return e.emit("ScatterND", [front, at, rows], out=e.out, reduction="add")
    summed = e.emit("ScatterND", [front, at, rows], reduction="add")
    back = [to_front.index(i) for i in range(rank)]
    return e.emit("Transpose", [summed], perm=back, out=e.out)


def _scatter_add_along(e: Emitter, n: Node, axis: int, after: list[int]) -> str:
    """A scatter-add on a later axis as ScatterElements: the index axes of the updates merged into one, each
    position spread over the update's other axes. The transposes the ScatterND form needs copy the whole data
    twice (the embedding's gradient, [d_e, N_V], gathered along N_V); the spread positions are the size of the
    updates."""
    data, idx, upd = n.src
    rank = data.type.rank
    rows = e.emit("Reshape", [e.value(upd), e.ints([0] * axis + [-1] + after)])
    column = e.emit("Reshape", [e.value(idx), e.ints([1] * axis + [-1] + [1] * len(after))])
    every = e.emit("Expand", [column, e.emit("Shape", [rows])])
    return e.emit("ScatterElements", [e.value(data), every, rows], out=e.out, axis=axis % rank, reduction="add")


@lowers(Op.SCATTER_ADD_ELEMENTS)
def _scatter_add_elements(e: Emitter, n: Node) -> str:
    # ScatterElements adds each update at its index along the axis (repeats accumulate, opset ≥ 16).
    data, idx, upd = (e.value(s) for s in n.src)
    return e.emit("ScatterElements", [data, idx, upd], out=e.out, axis=n.attrs["axis"] % n.type.rank,
                  reduction="add")


@lowers(Op.SLICE)
def _slice(e: Emitter, n: Node) -> str:
    axis = n.attrs["axis"] % n.src[0].type.rank
    if e.capture and reads_length(e, n.src[1]):
        # Slice reads its bounds on the host (a CUDA graph captures no copy there): rows start + 0 … n − 1 by
        # Gather, whose indices stay on the device (a learned position table's rows from the past length on)
        rows = e.size_of(n.type.shape[axis], (e.value(n.src[0]), axis))
        ids = e.emit("Add", [e.range(e.emit("Squeeze", [rows, e.ints([0])])), e.value(n.src[1])])
        return e.emit("Gather", [e.value(n.src[0]), ids], out=e.out, axis=axis)
    start, stop = (_bound(e, b) for b in n.src[1:3])
    return e.emit("Slice", [e.value(n.src[0]), start, stop, e.ints([axis])], out=e.out)


def _bound(e: Emitter, b: Node) -> str:
    """A slice bound as the 1-element tensor Slice takes. A constant one is written as such: onnx's
    shape inference reads a Constant's value but computes no Unsqueeze, and inside a local function
    (functions.py) the slice's shape is then all it has, as it ignores a function's value_info."""
    if b.op is Op.CONST:
        return e.ints([int(b.attrs["value"])])
    return e.emit("Unsqueeze", [e.value(b), e.ints([0])])


@lowers(Op.RESHAPE)
def _reshape(e: Emitter, n: Node) -> str:
    x = e.value(n.src[0])
    # Every target dim is known, so allowzero: a 0 means an empty axis, not "copy the input's".
    return e.emit("Reshape", [x, _target_shape(e, n, x)], out=e.out, allowzero=1)


def _target_shape(e: Emitter, n: Node, x: str) -> str:
    """Reshape's shape operand: int dims inline, symbolic dims read off the operand at run time."""
    src = n.src[0].shape
    pieces: list[str | list[int]] = []
    for d in n.attrs["shape"]:
        if isinstance(d, str):
            if d not in src:  # the verifier rejects such graphs; say so rather than guess
                raise BackendError(f"reshape to {n.type} at {n.span or n.scope or '?'}: "
                                   f"dim {d!r} is not a dim of the operand {n.src[0].type}")
            pieces.append(e.shape_dim(x, src.index(d)))
        elif pieces and isinstance(pieces[-1], list):
            pieces[-1].append(d)
        else:
            pieces.append([d])
    parts = [e.ints(p) if isinstance(p, list) else p for p in pieces]
    return parts[0] if len(parts) == 1 else e.emit("Concat", parts, axis=0)


@lowers(Op.GET)
def _get(e: Emitter, n: Node) -> str:
    return e.vals[id(n.src[0])][n.attrs["index"]]


def _with_unit_axis(e: Emitter, value: str, axis: int, rank: int) -> str:
    """The shape of `value` with a 1 at `axis`: what Expand broadcasts the other operand to."""
    parts = [e.emit("Shape", [value], end=axis)] if axis else []
    parts.append(e.ints([1]))
    if axis + 1 < rank:
        parts.append(e.emit("Shape", [value], start=axis + 1))
    return e.emit("Concat", parts, axis=0)


@lowers(Op.GATHER_ELEMENTS)
def _gather_elements(e: Emitter, n: Node) -> str:
    """GatherElements, which takes indices of the data's shape off the axis: each operand is expanded over the
    axes where only the other one has a size (a unit axis of the IR's broadcast)."""
    data, idx = n.src
    rank, axis = data.type.rank, n.attrs["axis"] % data.type.rank
    d, i = e.value(data), e.value(idx)
    others = [k for k in range(rank) if k != axis]
    if any(data.shape[k] != n.shape[k] for k in others):
        d = e.emit("Expand", [d, _with_unit_axis(e, i, axis, rank)])
    if any(idx.shape[k] != n.shape[k] for k in others):
        i = e.emit("Expand", [i, _with_unit_axis(e, e.value(data), axis, rank)])
    return e.emit("GatherElements", [d, i], out=e.out, axis=axis)
