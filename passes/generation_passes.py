"""The passes generation runs on a -O2 graph (manager.PIPELINES "generation-*").

  incremental_prefill   the prompt's graph, returning each causal attention's keys and values too
  incremental_step      the decode step: new tokens and the cache in, outputs for the new tokens out
  incremental_step_buffered  the same step with its cache in buffers of a fixed capacity, which each attention
                        appends to in place (kv_buffers.py states that interface's contract)
  incremental_encoder   an encoder–decoder's values computed from the encoder input alone
  last_position         the output cut to its last position, as early in the graph as it can be

The three incremental passes are three views of one derivation (kv_cache.derive_incremental), made
once per graph and kept in the PassContext, where the runtime also finds the cache's slots.
"""

from __future__ import annotations

from pseudoformer.ir import Graph
from pseudoformer.passes.kv_buffers import buffered_step
from pseudoformer.passes.kv_cache import IncrementalDecoder, derive_incremental
from pseudoformer.passes.last_position import keep_last_position
from pseudoformer.passes.pass_base import Pass, PassContext


def incremental(graph: Graph, ctx: PassContext) -> IncrementalDecoder:
    """The incremental decoder of `graph` over ctx.decoder_input, derived once."""
    if ctx.decoder_input is None:
        raise ValueError("the incremental decoder needs the decoder's token input (PassContext.decoder_input)")
    if id(graph) not in ctx.derived:
        ctx.derived[id(graph)] = (graph, derive_incremental(graph, ctx.decoder_input))
    return ctx.derived[id(graph)][1]


def _prefill(graph: Graph, ctx: PassContext) -> tuple[Graph, bool]:
    return incremental(graph, ctx).prefill, True


def _step(graph: Graph, ctx: PassContext) -> tuple[Graph, bool]:
    return incremental(graph, ctx).step, True


def _step_buffered(graph: Graph, ctx: PassContext) -> tuple[Graph, bool]:
    return buffered_step(incremental(graph, ctx)).graph, True


def _encoder(graph: Graph, ctx: PassContext) -> tuple[Graph, bool]:
    encoder = incremental(graph, ctx).encoder
    if encoder is None:
        raise ValueError(f"{graph.meta.get('entry', 'the model')} has no encoder input besides "
                         f"{ctx.decoder_input}")
    return encoder, True


def _last_position(graph: Graph, ctx: PassContext) -> tuple[Graph, bool]:
    if ctx.output is None or ctx.positions is None:
        raise ValueError("last_position needs the output and its position dim (PassContext.output, .positions)")
    return keep_last_position(graph, ctx.output, ctx.positions), True


PASSES = [
    Pass("incremental_prefill", _prefill, "the prompt's run, returning each causal attention's keys and values"),
    Pass("incremental_step", _step, "the decode step: new tokens and the key/value cache in, their outputs out"),
    Pass("incremental_step_buffered", _step_buffered, "the decode step with its cache in buffers of a fixed "
         "capacity: a length in, each attention writing its new keys and values into the buffers in place"),
    Pass("incremental_encoder", _encoder, "an encoder–decoder's values computed from the encoder input alone"),
    Pass("last_position", _last_position, "the output cut to its last position, pushed back through the graph"),
]
