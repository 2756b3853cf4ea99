"""The onnx-contrib pipeline: onnxruntime's com.microsoft kernels where they compute what the graph does.

  group_query_attention_fusion  rules/group_query_attention.py → GROUP_QUERY_ATTENTION
  kv_lengths                    rules/group_query_attention_lengths.py: its lengths from the attention
                                mask, for a step whose meta asks for it (onnxruntime-genai's)
  skip_norm_fusion              rules/skip_norm.py             → SKIP_RMS_NORM, SKIP_LAYER_NORM

They run last in an ONNX compile with contrib ops (after the "onnx" pipeline: cache fusion, packed
heads, decompositions, float16), on the graph as the backend lowers it, so that each op they make is
one ONNX node (ir/ops/fused_kernels.py) and no lowering needs to look at a node's neighbours. A file
that has them runs on onnxruntime only, which is why only `--contrib-ops` asks for them.
"""

from __future__ import annotations

from pseudoformer.ir import Graph, Op
from pseudoformer.ir.ops.fused_kernels import gqa_operands
from pseudoformer.passes.pass_base import Pass, PassContext
from pseudoformer.passes.rule import apply_rules
from pseudoformer.passes.rules import group_query_attention, group_query_attention_lengths, skip_norm


def _group_query_attention(graph: Graph, ctx: PassContext) -> tuple[Graph, bool]:
    """The fusion, in float16 too where the step's cache lives in buffers the kernel appends to: generate's
    (ctx.buffered_cache), and onnxruntime-genai's with its lengths from the mask (past_present_share_buffer)."""
    in_place = ctx.buffered_cache or bool(graph.meta.get(group_query_attention_lengths.META))
    return apply_rules(graph, [group_query_attention.rule(float16=in_place)], ctx.refusals, ctx.fired)


fuse_group_query_attention = Pass(
    "group_query_attention_fusion", _group_query_attention, "causal packed-head attention (rotation, packed q/k/v, "
    "last-position cut) → onnxruntime's GroupQueryAttention (float16 too in a step whose cache is in buffers)")


class KvLengthsError(ValueError):
    """Why a step's attentions cannot all read their lengths from the attention mask."""


def kv_lengths(graph: Graph, ctx: PassContext) -> tuple[Graph, bool]:
    """Every GroupQueryAttention over the cache driven by the attention mask, for a step whose meta asks
    (rules/group_query_attention_lengths.py). All or none: an attention left over the cache, or the
    positions past + arange(s) still read, would assume the padded layout the others leave; then a
    KvLengthsError says why, for the caller to keep the masked step."""
    asked = graph.meta.get(group_query_attention_lengths.META)
    if not asked:
        return graph, False
    refused: list = []
    out, changed = apply_rules(graph, [group_query_attention_lengths.rule(graph.input(asked["mask"]),
                                                                          int(asked["positions"]))], refused,
                                ctx.fired)
    ctx.refusals.extend(refused)
    for n in out.nodes():
        if n.op is Op.CACHED_ATTENTION or (n.op is Op.ATTENTION and n.src[1].op is Op.CONCAT):
            raise KvLengthsError(f"the attention at {n.span or n.scope} is not one GroupQueryAttention takes")
        if n.op is Op.GROUP_QUERY_ATTENTION and n.attrs.get("cached") and not n.attrs.get("lengths"):
            why = next((r[1] for r in refused if r[3] == n.scope), "refused")
            raise KvLengthsError(f"the attention at {n.span or n.scope} cannot read its lengths from the mask: {why}")
    pasts = {id(p) for n in out.nodes() if n.op is Op.GROUP_QUERY_ATTENTION for p in gqa_operands(n.src, n.attrs)[1]}
    for n in out.nodes():
        if group_query_attention_lengths.is_positions(n):
            raise KvLengthsError(f"the positions at {n.span or n.scope} are read by more than the rotation")
        # genai then binds past and present to one buffer of max_length: nothing may read the past's length
        if n.op is Op.DIM and id(n.src[0]) in pasts:
            raise KvLengthsError(f"the cache's length is read at {n.span or n.scope}")
    return out, changed


fuse_skip_norms = Pass.from_rules("skip_norm_fusion", "a residual sum and the norm that reads it → onnxruntime's "
                                  "Skip(Simplified)LayerNormalization", [skip_norm.RULE])


class CacheBufferError(ValueError):
    """Why a decode step's cache cannot live in buffers the attention appends to."""


def buffered_cache_dim(graph: Graph) -> str:
    """The past-length dim of a decode step whose cache can live in buffers longer than it, which
    GroupQueryAttention appends to in place: every attention over the cache is one the kernel took,
    and the past keys and values are graph inputs read by nothing but their attention and their sizes.
    Otherwise a CacheBufferError that says why."""
    cached = [n for n in graph.nodes() if n.op is Op.CACHED_ATTENTION
              or (n.op is Op.GROUP_QUERY_ATTENTION and n.attrs.get("cached"))]
    if not cached:
        raise CacheBufferError("the graph has no attention over a cache")
    consumers = graph.consumers()
    dims: set[object] = set()
    for n in cached:
        if n.op is Op.CACHED_ATTENTION:
            raise CacheBufferError(f"the attention at {n.span or n.scope} is not one GroupQueryAttention takes")
        _, past, _ = gqa_operands(n.src, n.attrs)
        for p in past:
            readers = {u.op for u in consumers.of(p)}
            if p.op is Op.CAST and p.src[0].op is Op.INPUT:  # a compile's float16 pass keeps inputs in float32
                raise CacheBufferError(f"the past keys and values at {n.span or n.scope} are {p.src[0].dtype.value} "
                                       f"inputs cast to {p.dtype.value}: buffers hold the cache in the step's own "
                                       "dtype (generation/precision.py's half_decoder makes a float16 step's)")
            if p.op is not Op.INPUT or not readers <= {Op.GROUP_QUERY_ATTENTION, Op.DIM}:
                raise CacheBufferError(f"the past keys and values at {n.span or n.scope} are read by more than "
                                       "their attention")
            dims.add(p.shape[2])
    if len(dims) != 1 or not isinstance(next(iter(dims)), str):
        raise CacheBufferError("the caches do not share one run-time past length")
    return str(next(iter(dims)))


PASSES = [
    fuse_group_query_attention,
    Pass("kv_lengths", kv_lengths,
         "onnxruntime-genai's step: GroupQueryAttention's lengths from attention_mask over a compact cache "
         "(only where the step's meta asks)"),
    fuse_skip_norms,
]
