"""Values assigned in pieces: `Y[i, t] ← A` and `Y[i + d/2, t] ← B` for i ∈ [d/2] each fill a block of
rows of Y; `W_p[2i − 1, t] ← …` and `W_p[2i, t] ← …` fill alternate rows.

Each piece covers a run of one axis (start, stride, count; the other axes whole). When the value is
read, the pieces become one tensor without scattering: blocks that tile the axis are one CONCAT,
runs of stride s that interleave (starts 0, …, s − 1) are stacked on a new axis and reshaped, and
positions no piece covers come from the value assigned before (a slice of it). A position assigned
twice, or never, is a diagnostic.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from pseudoformer.base.errors import Pos
from pseudoformer.frontend.errors import BadTypeError, ShapeError
from pseudoformer.frontend.expressions.affine import Run, last, poly_node, proven
from pseudoformer.frontend.frame import Frame
from pseudoformer.frontend.sizes import Size, simplify
from pseudoformer.frontend.tensor_ops import per_example, show, show_size, to_layout, unify
from pseudoformer.frontend.values import Label, Val
from pseudoformer.ir import Op, TensorType


@dataclass(frozen=True)
class Piece:
    runs: tuple[Run, ...]  # per paper axis: the positions this piece covers
    value: Val  # laid out [batch?] + dims (the runs' counts) + free variables
    pos: Pos


@dataclass
class Pieces:
    name: str
    extents: tuple[Size | None, ...]  # each axis's full size where known (declared, or the earlier value's)
    base: Val | None = None  # the value before these assignments: it fills what no piece covers
    pieces: list[Piece] = field(default_factory=list)


def whole(count: Size) -> Run:
    return Run("", Size.of(0), 1, count)


def add_piece(f: Frame, into: Pieces, piece: Piece) -> None:
    """Record a piece, refusing one that overlaps an earlier piece or lies outside the declared extent."""
    for axis, (run, extent) in enumerate(zip(piece.runs, into.extents, strict=True)):
        if extent is not None and (proven(run.start) is False or proven(extent - last(run) - 1) is False):
            raise f.error(ShapeError, f"{into.name} has {show_size(extent)} {_axis_word(axis, len(into.extents))}; "
                          f"this assigns {_span(run)}", piece.pos)
    for old in into.pieces:
        if _overlap(old.runs, piece.runs):
            axis = next((k for k, (a, b) in enumerate(zip(old.runs, piece.runs, strict=True)) if a != b), 0)
            both = _common(old.runs[axis], piece.runs[axis])
            word = _axis_word(axis, len(piece.runs))
            if both.isdigit():
                word = {"rows": "row", "columns": "column"}.get(word, "entry")
            raise f.error(BadTypeError, f"{word} {both} of {into.name} "
                          f"{'is' if both.isdigit() else 'are'} already assigned at line {old.pos.line}; each entry "
                          "is assigned once", piece.pos)
    into.pieces.append(piece)


def _axis_word(axis: int, rank: int) -> str:
    return "rows" if axis == 0 and rank == 2 else "columns" if axis == 1 and rank == 2 else "entries"


def _span(run: Run) -> str:
    first, end = show_size(run.start + 1), show_size(last(run) + 1)
    step = "" if run.stride == 1 else f" in steps of {run.stride}"
    return first if first == end else f"{first} to {end}{step}"


def _common(a: Run, b: Run) -> str:
    """The positions two runs share, shown 1-based where they are known numbers."""
    if a.stride == b.stride == 1 and all(x.is_int for x in (a.start, b.start, last(a), last(b))):
        lo, hi = max(a.start.value, b.start.value) + 1, min(last(a).value, last(b).value) + 1
        return str(lo) if lo == hi else f"{lo} to {hi}"
    return _span(b)


def _overlap(a: tuple[Run, ...], b: tuple[Run, ...]) -> bool:
    """Whether two pieces provably share an entry (unprovable: no, and assembling tells)."""
    return all(_runs_meet(x, y) for x, y in zip(a, b, strict=True))


def _runs_meet(x: Run, y: Run) -> bool:
    if x.stride == y.stride and (x.start - y.start).is_int and (x.start - y.start).value % x.stride:
        return False  # the same stride from starts in different residues: interleaved, disjoint
    return bool(proven(last(x) - y.start)) and bool(proven(last(y) - x.start))


def assemble(f: Frame, p: Pieces, pos: Pos) -> Val:
    """The whole value: one CONCAT (blocks), a stack and reshape (interleaved runs), slices of the base for gaps."""
    first = p.pieces[0]
    rank = len(first.runs)
    varying = [k for k in range(rank) if any(q.runs[k] != first.runs[k] for q in p.pieces)]
    if len(varying) > 1:
        raise f.error(BadTypeError, f"{p.name} is assigned in blocks along more than one axis; assign whole rows "
                      "or whole columns in each line", pos)
    axis = varying[0] if varying else _partial_axis(p)
    for k, (run, ext) in enumerate(zip(first.runs, p.extents, strict=True)):
        if k != axis and ext is not None and (run.start, run.stride, run.count) != (Size.of(0), 1, ext):
            raise f.error(BadTypeError, f"{p.name} is assigned in blocks along more than one axis; assign whole "
                          "rows or whole columns in each line", pos)
    extent = p.extents[axis] if p.extents[axis] is not None else _covered(p, axis)
    vals = _aligned(f, p, pos)
    runs = [q.runs[axis] for q in p.pieces]
    strides = {r.stride for r in runs}
    if strides == {1} or p.base is not None and len(p.pieces) == 1 and runs[0].stride == 1:
        return _blocks(f, p, axis, extent, vals, pos)
    if len(strides) == 1 and p.base is None:
        return _interleave(f, p, axis, extent, vals, pos)
    if len(strides) == 1:
        raise f.error(BadTypeError, f"runs of stride {min(strides)} over an earlier value of {p.name} are not "
                      f"supported; assign all {min(strides)} interleaved runs, without the earlier value", pos)
    raise f.error(BadTypeError, f"the entries of {p.name} assigned here do not interleave evenly; assign "
                  "runs of one stride s starting at each of the first s positions, or whole blocks", pos)


def _partial_axis(p: Pieces) -> int:
    """With one piece: the axis it does not cover wholly (the first, if it covers all)."""
    q = p.pieces[0]
    for k, run in enumerate(q.runs):
        if p.extents[k] is not None and (run.start != Size.of(0) or run.stride != 1 or run.count != p.extents[k]):
            return k
    return 0


def _covered(p: Pieces, axis: int) -> Size:
    """The extent of an undeclared value: where its last piece ends."""
    ends = [simplify(last(q.runs[axis]) + 1) for q in p.pieces]
    best = ends[0]
    for e in ends[1:]:
        if proven(e - best):
            best = e
    return best


def _aligned(f: Frame, p: Pieces, pos: Pos) -> list[Val]:
    """The pieces in one layout: the same free variables in the same order, and all per-example or none."""
    first = p.pieces[0].value
    names = {n for n, _ in first.free}
    for q in p.pieces[1:]:
        if {n for n, _ in q.value.free} != names:
            raise f.error(BadTypeError, f"the pieces of {p.name} depend on different indices: {show(first)} and "
                          f"{show(q.value)}", q.pos)
    batched = any(q.value.batched for q in p.pieces) or (p.base is not None and p.base.batched)
    target: list[Label] = [("b", None)] * batched + [("d", i) for i in range(len(first.dims))]
    target += [("f", n) for n, _ in first.free]
    out = []
    for q in p.pieces:
        v = per_example(f.b, q.value) if batched else q.value  # a learned piece beside per-example ones
        out.append(replace(v, node=to_layout(f.b, v, target)))
    return out


def _blocks(f: Frame, p: Pieces, axis: int, extent: Size, vals: list[Val], pos: Pos) -> Val:
    order = sorted(range(len(vals)), key=lambda k: _sort_key(p.pieces[k].runs[axis].start))
    parts: list[Val] = []
    at = Size.of(0)
    for k in order:
        run = p.pieces[k].runs[axis]
        if run.start != at:
            gap = run.start - at
            if proven(gap) is False or proven(gap - 1) is not True and not f.root().symbolic:
                raise f.error(BadTypeError, f"the blocks of {p.name} do not tile it: one starts at {_span(run)}, "
                              f"after {show_size(at)}", p.pieces[k].pos)
            parts.append(_gap(f, p, axis, at, gap, pos))
        parts.append(vals[k])
        at = run.start + run.count
    if at != extent and not f.root().symbolic:
        if proven(extent - at - 1) is not True:
            raise f.error(ShapeError, f"the blocks of {p.name} end at {show_size(at)}, past its "
                          f"{show_size(extent)}", pos)
        parts.append(_gap(f, p, axis, at, extent - at, pos))
    if len(parts) == 1:
        return parts[0]
    return _concat(f, parts, axis, extent)


def _sort_key(s: Size) -> tuple:
    return (len(s.terms), tuple((m, c) for m, c in s.terms))


def _gap(f: Frame, p: Pieces, axis: int, start: Size, count: Size, pos: Pos) -> Val:
    """Positions start … start + count − 1 that no piece assigns: the earlier value's, or a diagnostic."""
    if p.base is None:
        where = show_size(start + 1) if count == Size.of(1) else f"{show_size(start + 1)} to {show_size(start + count)}"
        raise f.error(BadTypeError, f"{_axis_word(axis, len(p.extents))} {where} of {p.name} are never "
                      "assigned", pos)
    b = p.base
    node = f.b.node(Op.SLICE, b.node, poly_node(f, start, pos), poly_node(f, start + count, pos),
                    axis=b.paper_axis0 + axis, dim=count.dim())
    return replace(b, node=node, dims=b.dims[:axis] + (count,) + b.dims[axis + 1:], const=None)


def _concat(f: Frame, parts: list[Val], axis: int, extent: Size) -> Val:
    batched = any(v.batched for v in parts)
    if batched:  # a slice of a shared base (`X ← W_p`) beside per-example pieces: per-example too
        parts = [per_example(f.b, v) for v in parts]
    first = parts[0]
    nodes = [v.node for v in parts]
    shape = list(nodes[0].type.shape)
    shape[first.paper_axis0 + axis] = extent.dim()
    node = f.b.node(Op.CONCAT, *nodes, axis=first.paper_axis0 + axis, type=TensorType(nodes[0].dtype, tuple(shape)))
    dims = first.dims[:axis] + (extent,) + first.dims[axis + 1:]
    return Val(node, first.kind, dims, first.free, batched)


def _interleave(f: Frame, p: Pieces, axis: int, extent: Size, vals: list[Val], pos: Pos) -> Val:
    runs = [q.runs[axis] for q in p.pieces]
    s = runs[0].stride
    starts = sorted(r.start.value if r.start.is_int else -1 for r in runs)
    count = runs[0].count
    if starts != list(range(s)) or any(r.count != count for r in runs):
        missing = sorted(set(range(s)) - set(starts))
        if missing and all(r.count == count for r in runs):
            raise f.error(BadTypeError, f"{_axis_word(axis, len(p.extents))} {missing[0] + 1}, {missing[0] + 1 + s}, "
                          f"… of {p.name} are never assigned", pos)
        raise f.error(BadTypeError, f"the runs of stride {s} assigned to {p.name} do not interleave evenly: they "
                      f"should start at each of positions 1 to {s} once, and have one length", pos)
    unify(f.b, simplify(count * s), extent, f"the rows of {p.name}")
    order = sorted(range(len(vals)), key=lambda k: runs[k].start.value)
    a0 = vals[0].paper_axis0 + axis
    stacked = [f.b.node(Op.UNSQUEEZE, vals[k].node, axes=[a0 + 1]) for k in order]
    node = f.b.node(Op.CONCAT, *stacked, axis=a0 + 1)
    shape = list(node.type.shape)
    merged = shape[a0]
    if isinstance(merged, int):
        new_shape = shape[:a0] + [merged * s] + shape[a0 + 2:]
        node = f.b.node(Op.RESHAPE, node, shape=new_shape)
    else:  # checking without a config: the same shape, the values do not matter
        return _concat(f, [vals[k] for k in order], axis, extent)
    first = vals[0]
    dims = first.dims[:axis] + (extent,) + first.dims[axis + 1:]
    return Val(node, first.kind, dims, first.free, first.batched)
