"""The decode step with its cache in buffers of a fixed capacity, which each attention appends to in place.

The step that kv_cache.py derives concatenates: it takes past.{i}.key/value of the positions decoded so far and
returns present.{i} = [past; new], a new value one position longer, so each token copies the whole cache. This
pass gives the same step another interface, the step in buffers:

    inputs   the step's own (new tokens [, encoder values]);
             past_sequence_length: int64 scalar L, the positions decoded so far;
             past.{i}.key [.., CAPACITY, d], past.{i}.value [.., CAPACITY, d_v]: buffers of capacity C whose
             first L positions hold the keys and values of those positions; what lies after them is never read.
    outputs  the step's outputs for the s new positions;
             present.{i}.key/value: the same buffers with positions [L, L + s) written with the new keys and
             values, every other position unchanged.

and the contract a caller and a backend keep:

    L + s ≤ C        the step is not defined past the buffers' end: the interpreter refuses such a call (the
                     impl of buffered_attention), a compiled kernel asserts it, and a runtime makes room first
                     (generation/cache_buffers.py grows the buffers by doubling, copying the first L positions);
    present is past  present.{i} is past.{i} written: a backend may write the new positions into the buffer it
                     was given and return that buffer (TVM's kernel does), so the caller gives its buffers up to
                     the step and holds the presents it gets back; it never reads a past it passed. The verifier
                     holds each buffer to be a graph input read by its attention alone (OpDef.overwrites), so no
                     other node can see a buffer before or after it is written.

Each `attention(q, concat(past_k, k), concat(past_v, v))` becomes buffered_attention(q, k, v, past_k, past_v, L)
(ir/ops/buffered_attention.py), its results the attention's output and the two presents; every `dim(past)` of
the positions axis (the positions of RoPE's angles, the rows of a position table) becomes L. The outputs are the
concatenating step's for the same L positions, position for position: the attention reads the buffers' first
L + s positions, which hold exactly [past; new]. Where that rewrite cannot keep the contract — an attention with a
mask or bias operand (sized to past + new), a cache read by more than its attention — buffered_step raises a
CacheBufferError saying where, and a runtime keeps the concatenating step.
"""

from __future__ import annotations

from dataclasses import dataclass

from pseudoformer.ir import Graph, Node, Op, TensorType
from pseudoformer.ir.types import DType
from pseudoformer.ir.verify import verify
from pseudoformer.passes.contrib_ops import CacheBufferError
from pseudoformer.passes.kv_cache import PAST, CacheSlot, IncrementalDecoder

__all__ = ["CAPACITY", "LENGTH", "BufferedStep", "CacheBufferError", "buffered_step"]

LENGTH = "past_sequence_length"  # the scalar input L, named as the ONNX step's (generation/step_values.py)
CAPACITY = "capacity"  # the buffers' position dim


@dataclass(frozen=True)
class BufferedStep:
    """The step in buffers; its slots name the buffers as the concatenating step names its caches (a buffer is
    bound as past.{i} and comes back as present.{i}), their types with CAPACITY for PAST."""

    graph: Graph
    slots: tuple[CacheSlot, ...]
    length: str = LENGTH


def buffered_step(dec: IncrementalDecoder) -> BufferedStep:
    """dec.step with its cache in buffers (the module's contract), or a CacheBufferError saying why not."""
    step = dec.step
    names = {n for s in dec.slots for n in (s.past_key, s.past_value)}
    pasts = {id(n): n for n in step.inputs if n.attrs["name"] in names}
    buffers = {i: Node(Op.INPUT, (), {"name": n.attrs["name"], "type": _with_capacity(n.type)})
               for i, n in pasts.items()}
    length = Node(Op.INPUT, (), {"name": LENGTH, "type": TensorType(DType.int64, ())})
    joins = _joins(step, pasts)
    memo: dict[int, Node] = {}
    for n in step.nodes():
        if n.op is Op.INPUT:
            memo[id(n)] = buffers.get(id(n), n)
        elif n.op is Op.DIM and id(n.src[0]) in pasts:
            rank = n.src[0].type.rank
            memo[id(n)] = length if n.attrs["axis"] % rank == rank - 2 else \
                Node.at(n, Op.DIM, (buffers[id(n.src[0])],), dict(n.attrs))
        elif id(n) in joins:
            continue  # made with its attention's results, below
        elif n.op is Op.ATTENTION and id(n.src[1]) in joins:
            q, k, v = memo[id(n.src[0])], memo[id(n.src[1].src[1])], memo[id(n.src[2].src[1])]
            kb, vb = buffers[id(n.src[1].src[0])], buffers[id(n.src[2].src[0])]
            r = Node.at(n, Op.BUFFERED_ATTENTION, (q, k, v, kb, vb, length), dict(n.attrs))
            for i, m in enumerate((n, n.src[1], n.src[2])):
                memo[id(m)] = Node.at(n, Op.GET, (r,), {"index": i})
        else:
            src = tuple(memo[id(s)] for s in n.src)
            memo[id(n)] = n if all(a is b for a, b in zip(src, n.src, strict=True)) else \
                Node.at(n, n.op, src, dict(n.attrs))
    inputs = [memo[id(n)] for n in step.inputs]
    graph = Graph([*inputs, length], [(name, memo[id(n)]) for name, n in step.outputs], dict(step.meta))
    verify(graph)  # the buffers read by their attention alone, every type as inferred
    slots = tuple(CacheSlot(s.past_key, s.past_value, s.present_key, s.present_value,
                            _with_capacity(s.key_type), _with_capacity(s.value_type)) for s in dec.slots)
    return BufferedStep(graph, slots)


def _with_capacity(t: TensorType) -> TensorType:
    return TensorType(t.dtype, tuple(CAPACITY if d == PAST else d for d in t.shape))


def _joins(step: Graph, pasts: dict[int, Node]) -> set[int]:
    """The concatenations [past; new] of the step, each read by one attention (as its keys or values) and
    otherwise only returned as a present; a CacheBufferError where the step does anything else with a cache."""
    consumers = step.consumers()
    joins: set[int] = set()
    for p in pasts.values():
        for u, slot in consumers.slots(p):
            if u.op is Op.DIM:
                continue
            where = u.span or u.scope or p.attrs["name"]
            rank = p.type.rank
            if u.op is not Op.CONCAT or slot != 0 or len(u.src) != 2 or u.attrs["axis"] % rank != rank - 2:
                raise CacheBufferError(f"the cache {p.attrs['name']} is read by {u.op.value} at {where}, not only "
                                       "appended to")
            readers = consumers.slots(u)
            att = readers[0][0] if len(readers) == 1 else None
            if att is None or att.op is not Op.ATTENTION or readers[0][1] not in (1, 2):
                raise CacheBufferError(f"the keys and values of {p.attrs['name']} at {where} are read by more than "
                                       "one attention")
            if att.attrs.get("q_heads", 0):
                raise CacheBufferError(f"the attention at {att.span or att.scope} packs its heads")
            if len(att.src) > 3:
                raise CacheBufferError(f"the attention at {att.span or att.scope} has a mask or bias operand, "
                                       "sized to the past and new positions, not to the buffers")
            k, v = att.src[1], att.src[2]
            if not (k.op is Op.CONCAT and v.op is Op.CONCAT and id(k.src[0]) in pasts and id(v.src[0]) in pasts):
                raise CacheBufferError(f"the attention at {att.span or att.scope} reads only one cache")
            joins.add(id(u))
    return joins
