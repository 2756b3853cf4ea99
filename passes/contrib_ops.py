"""The onnx-contrib pipeline: onnxruntime's com.microsoft kernels where they compute what the graph does.

  group_query_attention_fusion  rules/group_query_attention.py → GROUP_QUERY_ATTENTION
  skip_norm_fusion              rules/skip_norm.py             → SKIP_RMS_NORM, SKIP_LAYER_NORM

They run last in an ONNX compile with contrib ops (after the "onnx" pipeline: cache fusion, packed
heads, decompositions, float16), on the graph as the backend lowers it, so that each op they make is
one ONNX node (ir/ops/fused_kernels.py) and no lowering needs to look at a node's neighbours. A file
that has them runs on onnxruntime only, which is why only `--contrib-ops` asks for them.
"""

from __future__ import annotations

from pseudoformer.ir import Graph, Op
from pseudoformer.ir.ops.fused_kernels import gqa_operands
from pseudoformer.passes.pass_base import Pass, with_refusals
from pseudoformer.passes.rule import apply_rules
from pseudoformer.passes.rules import group_query_attention, skip_norm


def fuse_group_query_attention(graph: Graph, refusals: list | None = None) -> tuple[Graph, bool]:
    return apply_rules(graph, [group_query_attention.RULE], refusals)


def fuse_skip_norms(graph: Graph, refusals: list | None = None) -> tuple[Graph, bool]:
    return apply_rules(graph, [skip_norm.RULE], refusals)


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
            if p.op is not Op.INPUT or not readers <= {Op.GROUP_QUERY_ATTENTION, Op.DIM}:
                raise CacheBufferError(f"the past keys and values at {n.span or n.scope} are read by more than "
                                       "their attention")
            dims.add(p.shape[2])
    if len(dims) != 1 or not isinstance(next(iter(dims)), str):
        raise CacheBufferError("the caches do not share one run-time past length")
    return str(next(iter(dims)))


PASSES = [
    Pass("group_query_attention_fusion", with_refusals(fuse_group_query_attention),
         "causal packed-head attention (rotation, packed q/k/v, last-position cut) → onnxruntime's "
         "GroupQueryAttention"),
    Pass("skip_norm_fusion", with_refusals(fuse_skip_norms),
         "a residual sum and the norm that reads it → onnxruntime's Skip(Simplified)LayerNormalization"),
]
