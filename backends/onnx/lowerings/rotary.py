"""Rotary embedding → ONNX RotaryEmbedding (opset 23), on [batch, seq, H·d] (packed, or one head) or
[batch, H, seq, d], with its cos/sin caches in the 3-D form [batch, seq, d/2] the op takes without
position ids: the angles are computed in the graph, from the positions, and broadcast over the batch (or,
[batch, 1, seq, d/2], computed per example from its own positions, and squeezed).
A partial rotation (rotary_dim) is the op's rotary_embedding_dim, its caches [batch, seq, rotary_dim/2].
Any other form (the rotated axis not the last, angles that vary by head) lowers its formula."""

from __future__ import annotations

from pseudoformer.backends.onnx.emitter import Emitter
from pseudoformer.backends.onnx.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op


def _seq_axis(n: Node) -> int:
    return 2 if n.src[0].type.rank == 4 else 1


def _takes(n: Node, opset: int) -> bool:
    x, c, s = n.src
    if opset < 23 or n.attrs["axis"] % x.type.rank != x.type.rank - 1 or x.type.rank not in (3, 4):
        return False
    if x.type.rank == 4 and n.attrs.get("heads", 0):
        return False
    seq = x.shape[_seq_axis(n)]
    # the angles must be one [seq, d/2] table for every example and head, or one per example
    return all((t.type.rank <= 2 and (t.type.rank < 2 or t.shape[0] in (seq, 1))) or _per_example(t, x, seq)
               for t in (c, s))


def _per_example(angles: Node, x: Node, seq: object) -> bool:
    """[batch, 1, seq, d/2] against [batch, H, seq, d]: each example's own positions (an onnxruntime-genai
    step's position_ids, passes/genai_interface.py), shared by the heads."""
    return angles.type.rank == x.type.rank == 4 and angles.shape[0] == x.shape[0] and angles.shape[1] == 1 \
        and angles.shape[2] == seq


def _cache(e: Emitter, x: Node, angles: Node, seq_axis: int) -> str:
    """cos or sin [seq, d/2] expanded over the batch, once per table and batch for all the model's rotations."""
    batch, seq = x.shape[0], x.shape[seq_axis]
    key = ("rotary cache", e.region, e.value(angles), batch, seq)  # per local function, as shape_of is
    if key not in e.shared and angles.type.rank == 4:  # per example already: [batch, 1, seq, d/2] → [batch, seq, d/2]
        e.shared[key] = e.emit("Squeeze", [e.value(angles), e.ints([1])])
    if key not in e.shared:
        xv = e.value(x)
        sizes = [e.size_of(batch, (xv, 0)), e.size_of(seq, (xv, seq_axis)), e.ints([angles.shape[-1]])]
        e.shared[key] = e.emit("Expand", [e.value(angles), e.emit("Concat", sizes, axis=0)])
    return e.shared[key]


@lowers(Op.ROTARY, when=_takes)
def _rotary(e: Emitter, n: Node) -> str:
    x, c, s = n.src
    xv = e.value(x)
    caches = [_cache(e, x, t, _seq_axis(n)) for t in (c, s)]
    attrs = {"num_heads": int(n.attrs.get("heads", 0)) or 1} if x.type.rank == 3 else {}
    if n.attrs.get("rotary_dim", 0):
        attrs["rotary_embedding_dim"] = int(n.attrs["rotary_dim"])
    e.annotate(xv, x)
    return e.emit("RotaryEmbedding", [xv, *caches], out=e.out, **attrs)


