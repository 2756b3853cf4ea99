"""The ONNX emitter: the state of one lowering and the helpers each op's lowering (lowerings/) writes with.

Run-time sizes stay symbolic: an IR dim named "seq" becomes the ONNX dim_param "seq", and any size an
op needs at run time (a reshape target, a mask extent) is read from a tensor's Shape, so one file
serves every batch size and sequence length.

Names follow the IR so that a model can be read next to the printer's dump: the value of node %n is
v<n> (or the graph output's name, when the node is an output), its ONNX node is "<scope>/<op>_<n>"
(helpers get a further "/<OnnxOp>"), and each node's doc_string holds its source location.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pseudoformer.ir.graph import Graph
from pseudoformer.ir.node import Node
from pseudoformer.ir.ops import Op
from pseudoformer.ir.types import DType, Span, TensorType

ELEM = {
    DType.float32: TensorProto.FLOAT,
    DType.float16: TensorProto.FLOAT16,
    DType.float64: TensorProto.DOUBLE,
    DType.int64: TensorProto.INT64,
    DType.uint8: TensorProto.UINT8,
    DType.bool: TensorProto.BOOL,
}
NUMPY = {
    TensorProto.FLOAT: np.float32,
    TensorProto.FLOAT16: np.float16,
    TensorProto.DOUBLE: np.float64,
    TensorProto.INT64: np.int64,
    TensorProto.INT32: np.int32,  # GroupQueryAttention's sequence lengths
    TensorProto.UINT8: np.uint8,
    TensorProto.BOOL: np.bool_,
}


def value_info(name: str, elem: int, t: TensorType) -> onnx.ValueInfoProto:
    # Symbolic dims become dim_params named like the IR dims, which is what makes one file serve
    # every batch size and sequence length.
    return helper.make_tensor_value_info(name, elem, [d if isinstance(d, str) else int(d) for d in t.shape])


def _free_prefix(prefix: str, taken: set[str]) -> str:
    while any(re.fullmatch(re.escape(prefix) + r"\d+(\.\d+)?", name) for name in taken):
        prefix += "_"
    return prefix


class Emitter:
    """Lowers one graph: `vals` holds each IR node's ONNX value (a name, or names for a tuple)."""

    def __init__(self, graph: Graph, opset: int) -> None:
        self.graph = graph
        self.opset = opset
        # Symbolic dims whose size is a graph input rather than a tensor's Shape: the cache's past length
        # when the cache lives in buffers longer than it (lower.py, kv_buffers).
        self.sizes: dict[str, str] = {}
        # A decode step for CUDA graphs (CompileOptions.cuda_graph, with the cache in buffers): what the host reads
        # (GroupQueryAttention's total length, its tables' padding) is made from sizes alone, never from the
        # past length, a value on the device (lowerings/group_query_attention.py).
        self.capture = False
        self.nodes: list[onnx.NodeProto] = []
        # With local functions, the call each node is in (`region` when it was emitted): constants
        # and shapes are then shared within a call only, so that every call computes its own.
        self.region: object = None
        self.owner: list[object] = []
        self.vals: dict[int, Any] = {}
        self.consts: dict[tuple, str] = {}
        self.shape_of: dict[tuple[object, str, int], str] = {}
        self.shared: dict[tuple, str] = {}  # values lowerings share across nodes (rotary's cos/sin caches)
        # Types onnx's shape inference cannot work out alone (3-D Attention after a Slice): from the IR.
        self.value_info: list[onnx.ValueInfoProto] = []
        self.names: set[str] = set()
        self.span: Span | None = None
        self.base = ""
        self.out = ""
        self.k = 0
        # Internal values are v<n> (n as in the printer's %n) and c<n> for constants; a graph
        # name that looks like one pushes the prefixes aside rather than clash with it.
        taken = {n.attrs["name"] for n in graph.nodes() if n.op in (Op.INPUT, Op.PARAM)}
        taken |= {name for name, _ in graph.outputs}
        self.v, self.c = _free_prefix("v", taken), _free_prefix("c", taken)
        # A node that is a graph output computes straight into the output's name: no Identity copy
        # (a step's present keys and values, which are large, above all).
        self.output_of: dict[int, str] = {}
        # ... and so does a result of an op with several, where a `get` of it is a graph output.
        self.result_output: dict[tuple[int, int], str] = {}
        for name, n in graph.outputs:
            self.output_of.setdefault(id(n), name)
            if n.op is Op.GET:
                self.result_output[id(n.src[0]), n.attrs["index"]] = name

    # ---- where the next values go

    def start(self, n: Node, i: int) -> None:
        self.base = f"{n.scope}/{n.op.value}_{i}" if n.scope else f"{n.op.value}_{i}"
        self.out, self.k, self.span = self.output_of.get(id(n), f"{self.v}{i}"), 0, n.span

    def result_names(self, n: Node, count: int) -> list[str]:
        """The values of an op with `count` results: each a graph output's name where a `get` of it is one.
        Call it before emitting the op's helpers, whose names would otherwise take the same numbers."""
        self.k = max(self.k, count - 1)  # helpers emitted after this are numbered past the results
        return [self.result_output.get((id(n), i), f"{self.out}.{i}") for i in range(count)]

    # ---- emitting

    def emit(self, op_type: str, inputs: Sequence[str], *, out: str | None = None, node_name: str | None = None,
             **attrs: Any) -> str:
        final = out == self.out
        if out is None:
            self.k += 1
            out = f"{self.out}.{self.k}"
        name = node_name or (self.base if final else f"{self.base}/{op_type}")
        if name in self.names:
            suffix = 2
            while f"{name}_{suffix}" in self.names:
                suffix += 1
            name = f"{name}_{suffix}"
        self.names.add(name)
        self._append(helper.make_node(op_type, list(inputs), [out], name=name, **attrs))
        return out

    def emit_multi(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str], **attrs: Any) -> None:
        """A node with several outputs, named by the caller."""
        name = f"{self.base}/{op_type}"
        self.names.add(name)
        self._append(helper.make_node(op_type, list(inputs), list(outputs), name=name, **attrs))

    def _append(self, node: onnx.NodeProto) -> None:
        if self.span is not None:
            node.doc_string = str(self.span)
        self.nodes.append(node)
        self.owner.append(self.region)

    def const(self, value: Any, elem: int, out: str | None = None) -> str:
        arr = np.asarray(value, dtype=NUMPY[elem])
        key = (self.region, elem, arr.shape, arr.tobytes())
        if out is None and key in self.consts:
            return self.consts[key]
        name = out or f"{self.c}{len(self.consts)}"
        node_name = None if out else f"constants/{name}"
        self.emit("Constant", [], out=name, node_name=node_name, value=numpy_helper.from_array(arr, name))
        if out is None:
            self.consts[key] = name
        return name

    def ints(self, values: Sequence[int]) -> str:
        return self.const(np.asarray(values, dtype=np.int64), TensorProto.INT64)

    def value(self, n: Node) -> str:
        """The ONNX value of IR node n (a constant is made where it is used)."""
        if n.op is Op.CONST:
            return self.const(n.attrs["value"], ELEM[n.dtype])
        return self.vals[id(n)]

    def shape_dim(self, value: str, axis: int) -> str:
        """A run-time size as an int64 [1] tensor."""
        key = (self.region, value, axis)
        if key not in self.shape_of:
            self.shape_of[key] = self.emit("Shape", [value], start=axis, end=axis + 1)
        return self.shape_of[key]

    def size_of(self, dim: str | int, fallback: tuple[str, int]) -> str:
        """A run-time size as an int64 [1] tensor, read off a graph input that has the dim (the same
        Shape for every node that needs it), else off `fallback` (value, axis)."""
        if isinstance(dim, int):
            return self.ints([dim])
        if dim in self.sizes:
            return self.sizes[dim]
        for n in self.graph.inputs:
            if dim in n.type.shape:
                return self.shape_dim(n.attrs["name"], n.type.shape.index(dim))
        return self.shape_dim(*fallback)

    def range(self, n: str, out: str | None = None, start: str | None = None) -> str:
        zero, one = self.const(0, TensorProto.INT64), self.const(1, TensorProto.INT64)
        return self.emit("Range", [start or zero, n, one], out=out)

    def annotate(self, name: str, n: Node) -> None:
        """Give the value `name` the IR's type of n, where onnx's shape inference cannot follow it."""
        known = {i.name for i in self.value_info} | set(self.output_of.values())
        if name not in known and n.op not in (Op.INPUT, Op.PARAM):
            self.value_info.append(value_info(name, ELEM[n.dtype], n.type))
