"""group_query_attention → com.microsoft GroupQueryAttention, an onnxruntime kernel (ir/ops/fused_kernels.py).

    group_query_attention(QKV | Q, K, V [, K_past, V_past] [, cos, sin]; packed, cached, rotary, last, …)
  →
    GroupQueryAttention(QKV | Q, K, V, K_past, V_past, seqlens_k, total, cos', sin', position_ids;
                        num_heads, kv_num_heads, scale, do_rotary[, local_window_size, softcap])

passes/rules/group_query_attention.py makes the op, with contrib ops, where the kernel computes what
the attention does; what the kernel wants beside it is made here from run-time sizes. Its queries are
as many as the new keys: one query (the last position, bottom-right aligned) is padded in front to s
rows, which attend and are dropped; with `last` (and for a padded query) the last row is kept. The
kernel looks rows of its cos/sin cache up by position id and wants one row per position up to past + s:
so the ids are 0 … s−1, rows of our table of the new positions, and the table is padded with `past`
unused rows.

With `lengths` (onnxruntime-genai's step) seqlens_k and the total length are read off the attention mask,
as genai's own builder makes them: ReduceSum(mask) − 1 per row and the mask's width; the tables are
already one row per position, and the kernel finds each row's positions from seqlens_k itself.

For CUDA graphs (Emitter.capture: a decode step whose cache is in buffers of capacity C), what the kernel reads on
the host is made from sizes alone, so that no value goes from the device to the host within the step (onnxruntime
captures no step that copies one): the total length is C for one new token (the kernel then reads each row's
length from seqlens_k, on the device) and s for a prompt, which must start an empty cache; the tables are padded
to C rows. seqlens_k still comes from the past length, on the device.
"""

from __future__ import annotations

from collections.abc import Callable

from onnx import TensorProto

from pseudoformer.backends.onnx.emitter import ELEM, Emitter
from pseudoformer.backends.onnx.lowerings.registry import lowers
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op
from pseudoformer.ir.ops.fused_kernels import gqa_mask, gqa_operands


def _int32_scalar(e: Emitter, value: str) -> str:
    return e.emit("Cast", [e.emit("Squeeze", [value, e.ints([0])])], to=TensorProto.INT32)


def _shared(e: Emitter, key: tuple, make: Callable[[], str]) -> str:
    """A helper value every layer's kernel reads alike, made once (per local function's region)."""
    key = ("group query attention", e.region, *key)
    if key not in e.shared:
        e.shared[key] = make()
    return e.shared[key]


@lowers(Op.GROUP_QUERY_ATTENTION)
def _group_query_attention(e: Emitter, n: Node) -> str | tuple[str, ...]:
    packed, past_nodes, tables_nodes = gqa_operands(n.src, n.attrs)
    cached = bool(n.attrs.get("cached"))
    new_rows = packed[0].shape[1] if len(packed) == 1 else packed[1].shape[1]
    padded = len(packed) == 3 and packed[0].shape[1] != new_rows  # one query over s new keys
    qkv = [e.value(packed[0]), "", ""] if len(packed) == 1 else [e.value(x) for x in packed]
    if padded:
        rows = e.emit("Sub", [e.shape_dim(qkv[1], 1), e.ints([1])])
        qkv[0] = e.emit("Pad", [qkv[0], e.emit("Concat", [e.ints([0]), rows, e.ints([0, 0, 0, 0])], axis=0)])
    past = [e.value(x) for x in past_nodes] if cached else ["", ""]
    # Sizes read off the graph's inputs where a dim is one of theirs, so that every layer shares them.
    dims = (packed[-1].shape[0], new_rows, past_nodes[0].shape[2] if cached else 0)
    batch = e.size_of(dims[0], (qkv[1] or qkv[0], 0))
    new = e.size_of(dims[1], (qkv[1] or qkv[0], 1))  # [1] int64: the new positions
    past_len = e.size_of(dims[2], (past[0], 2)) if cached else None
    extra: list[str] = []
    mask_node = gqa_mask(n.src, n.attrs)
    if mask_node is not None:  # each row's length from the mask, its positions found by the kernel
        mask = e.value(mask_node)
        seqlens = _shared(e, ("mask seqlens", mask), lambda: e.emit("Cast", [e.emit("Sub", [
            e.emit("ReduceSum", [mask, e.ints([1])], keepdims=0), e.const(1, ELEM[mask_node.dtype])])],
            to=TensorProto.INT32))
        total32 = _shared(e, ("mask total", mask), lambda: _int32_scalar(e, e.shape_dim(mask, 1)))
        extra = [e.value(t) for t in tables_nodes]
    else:
        total = _shared(e, ("total", dims), lambda: e.emit("Add", [new, past_len]) if past_len else new)
        total32 = _shared(e, ("total32", dims), lambda: _int32_scalar(e, total))
        seqlens = _shared(e, ("seqlens", dims), lambda: e.emit(
            "Expand", [e.emit("Sub", [total32, e.const(1, TensorProto.INT32)]), batch]))
    capacity = None
    if e.capture and cached and mask_node is None and dims[2] in e.sizes:
        capacity = _shared(e, ("capacity", dims), lambda: e.shape_dim(past[0], 2))
        total32 = _shared(e, ("capture total", dims), lambda: _int32_scalar(e, e.emit(
            "Where", [e.emit("Equal", [new, e.ints([1])]), capacity, new])))
    if mask_node is None and tables_nodes:
        tables = [e.value(t) for t in tables_nodes]
        if past_len is not None:  # one row per position up to past + s (or C): the past's rows are never read
            spare = past_len if capacity is None else _shared(e, ("capture rows", dims),
                                                              lambda: e.emit("Sub", [capacity, new]))
            pads = _shared(e, ("pads", dims), lambda: e.emit("Concat", [e.ints([0, 0]), spare, e.ints([0])], axis=0))
            tables = [_shared(e, ("table", t, dims), lambda t=t: e.emit("Pad", [t, pads])) for t in tables]
        ids = _shared(e, ("ids", dims), lambda: e.emit("Expand", [
            e.emit("Unsqueeze", [e.range(e.emit("Squeeze", [new, e.ints([0])])), e.ints([0])]),
            e.emit("Concat", [batch, new], axis=0)]))
        extra = [*tables, ids]
    inputs = [*qkv, *past, seqlens, total32, *extra]
    attrs = {"num_heads": int(n.attrs["q_heads"]), "kv_num_heads": int(n.attrs["kv_heads"]),
             "scale": float(n.attrs["scale"]), "do_rotary": int(bool(tables_nodes))}
    if n.attrs.get("window", 0):
        attrs["local_window_size"] = int(n.attrs["window"])
    if n.attrs.get("softcap", 0.0):  # the scaled scores capped as c·tanh(S/c) before the mask, as ONNX Attention's
        attrs["softcap"] = float(n.attrs["softcap"])
    outputs = e.result_names(n, 3) if cached else [e.out]
    if padded or n.attrs.get("last"):  # the rows before the last are dropped: the last is the one query asked for
        whole = f"{outputs[0]}.padded"
        e.emit_multi("GroupQueryAttention", inputs, [whole, *outputs[1:]], domain="com.microsoft", **attrs)
        e.emit("Slice", [whole, e.ints([-1]), e.ints([2**62]), e.ints([1])], out=outputs[0])
    else:
        e.emit_multi("GroupQueryAttention", inputs, outputs, domain="com.microsoft", **attrs)
    return tuple(outputs) if cached else outputs[0]
