"""The passes that prepare an optimised graph for a backend, and the padding mask.

They rewrite what a backend's kernels take rather than what the paper wrote, so they run after the
optimisation level, in the backend's pipeline (manager.PIPELINES "onnx", "tvm"):

  cache_fusion     attention over [past; new] keys and values → cached_attention (appends in place)
  packed_heads     head-batched attention → its packed [b, s, H·d] form, without head transposes
  decompose        ops the backend has no kernel for → their formulas (the backend's `accepts`)
  float16          the model in half precision, with fp32 where fp16 loses too much
  fold_constants   tensors computed from weights alone → weights, computed at compile time
  padding_mask     an attention_mask input per token input, ANDed into every attention over it
"""

from __future__ import annotations

from pseudoformer.ir import Graph
from pseudoformer.passes.cache_fusion import fuse_cache
from pseudoformer.passes.decompose import decompose
from pseudoformer.passes.float16 import to_float16
from pseudoformer.passes.fold_constants import fold_constants
from pseudoformer.passes.packed_heads import pack_heads
from pseudoformer.passes.padding_mask import add_padding_masks
from pseudoformer.passes.pass_base import Pass, PassContext, plain


def _decompose(graph: Graph, ctx: PassContext) -> tuple[Graph, bool]:
    if ctx.accepts is None:
        raise ValueError("the decompose pass needs the target backend's lowerings (PassContext.accepts)")
    return decompose(graph, ctx.accepts)


def _float16(graph: Graph, ctx: PassContext) -> tuple[Graph, bool]:
    half, changed = to_float16(graph)
    if ctx.weights is not None:  # the arrays follow their PARAMs, for passes that read them (folding)
        types = {p.attrs["name"]: p.dtype for p in half.params()}
        ctx.weights = {k: v.astype(types[k].value) if k in types and v.dtype != types[k].value else v
                       for k, v in ctx.weights.items()}
    return half, changed


def _fold(graph: Graph, ctx: PassContext) -> tuple[Graph, bool]:
    if ctx.weights is None:
        raise ValueError("constant folding needs the weights (PassContext.weights)")
    folded, ctx.weights = fold_constants(graph, ctx.weights)
    return folded, folded is not graph


PASSES = [
    Pass("cache_fusion", plain(fuse_cache),
         "attention over concat(past, new) keys and values → one cached_attention that appends to the cache"),
    Pass("packed_heads", plain(pack_heads),
         "head-batched attention on [batch, seq, H·d] directly (ONNX Attention's 3-D form), no head transposes"),
    Pass("decompose", _decompose, "ops the backend has no kernel for → their formulas (attention by parts, …)"),
    Pass("float16", _float16,
         "compute in float16, with reductions, softmaxes and what only they read in float32; explicit casts"),
    Pass("fold_constants", _fold, "tensors computed from weights alone → new weights, computed at compile time"),
    Pass("padding_mask", plain(lambda g: (add_padding_masks(g), True)),
         "an attention_mask input per token input, ANDed into every fused attention over its positions"),
]
